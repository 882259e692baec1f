"""The built-in bundles' store: where it is, when a stored bundle is current, and what is built when it
is not (a stand-in export and stand-in processes; the real export is tests/conftest.py's demo bundle)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import runtime.export.demo as demo
import runtime.export.export
from runtime import __version__
from runtime.bundle.manifest import Manifest
from runtime.engine.config import EngineConfig
from runtime.errors import ConfigError, MissingDependencyError
from runtime.versions import package_version
from tests.bundle.manifests import small_manifest


def write_manifest(path: Path, name: str, **tools: str) -> Manifest:
    m = small_manifest(name, tools={"lerobot_runtime": __version__, "openvino": package_version("openvino"), **tools})
    path.mkdir(parents=True, exist_ok=True)
    m.write(path)
    return m


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    for name in ("LEROBOT_RUNTIME_BUNDLES", "STATE_DIRECTORY", "XDG_DATA_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return monkeypatch


def test_the_store_is_the_variable_then_systemds_state_then_xdg_then_home(env: pytest.MonkeyPatch) -> None:
    home = Path(str(Path.home()))
    assert demo.bundle_store() == home / ".local" / "share" / "lerobot-runtime" / "bundles"
    env.setenv("XDG_DATA_HOME", "/xdg")
    assert demo.bundle_store() == Path("/xdg/lerobot-runtime/bundles")
    env.setenv("STATE_DIRECTORY", "/var/lib/lerobot-runtime:/var/lib/other")
    assert demo.bundle_store() == Path("/var/lib/lerobot-runtime/bundles")
    env.setenv("LEROBOT_RUNTIME_BUNDLES", "/opt/bundles")
    assert demo.bundle_store() == Path("/opt/bundles")


def test_an_empty_variable_is_not_a_store(env: pytest.MonkeyPatch) -> None:
    env.setenv("LEROBOT_RUNTIME_BUNDLES", "")
    env.setenv("XDG_DATA_HOME", "")
    assert demo.bundle_store() == Path.home() / ".local" / "share" / "lerobot-runtime" / "bundles"


def test_a_bundle_is_current_with_its_name_this_release_and_this_openvino(tmp_path: Path) -> None:
    write_manifest(tmp_path / "ok", "demo_act_residual")
    assert demo._is_current(tmp_path / "ok", "demo_act_residual")
    assert not demo._is_current(tmp_path / "ok", "act_resnet18")
    write_manifest(tmp_path / "old", "demo_act_residual", lerobot_runtime="0.0.1")
    assert not demo._is_current(tmp_path / "old", "demo_act_residual")
    write_manifest(tmp_path / "ov", "demo_act_residual", openvino="2024.0.0")
    assert not demo._is_current(tmp_path / "ov", "demo_act_residual")
    assert not demo._is_current(tmp_path / "missing", "demo_act_residual")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "manifest.json").write_text("{")
    assert not demo._is_current(tmp_path / "broken", "demo_act_residual")


def test_an_unknown_built_in_bundle_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        demo.ensure_bundle("diffusion", tmp_path)
    assert str(e.value) == "built-in bundle: expected one of demo, act, got 'diffusion'"


@pytest.fixture
def exports(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, Path, dict[str, Any]]]:
    calls: list[tuple[Any, Path, dict[str, Any]]] = []

    def export_bundle(factory: Any, out: Path, **kwargs: Any) -> None:
        calls.append((factory, Path(out), kwargs))
        write_manifest(Path(out), kwargs["policy_name"])

    monkeypatch.setattr(runtime.export.export, "export_bundle", export_bundle)
    return calls


@pytest.mark.parametrize(
    ("kind", "factory", "name"),
    [
        ("demo", "runtime.policies.act:make_demo_policy", "demo_act_residual"),
        ("act", "runtime.policies.act:make_act_policy", "act_resnet18"),
    ],
)
def test_a_built_in_bundle_is_exported_once_then_served_from_the_store(
    tmp_path: Path, exports: list[tuple[Any, Path, dict[str, Any]]], kind: str, factory: str, name: str
) -> None:
    assert demo.ensure_bundle(kind, tmp_path) == tmp_path / kind
    assert exports == [(factory, tmp_path / kind, {"device": "CPU", "policy_name": name})]
    assert demo.ensure_bundle(kind, tmp_path) == tmp_path / kind
    assert len(exports) == 1  # current: not exported again


def test_the_store_is_used_when_no_root_is_given(
    env: pytest.MonkeyPatch, tmp_path: Path, exports: list[tuple[Any, Path, dict[str, Any]]]
) -> None:
    env.setenv("LEROBOT_RUNTIME_BUNDLES", str(tmp_path / "store"))
    assert demo.ensure_bundle() == tmp_path / "store" / "demo"
    assert exports[0][1] == tmp_path / "store" / "demo"


def test_a_stale_bundle_is_exported_again(tmp_path: Path, exports: list[tuple[Any, Path, dict[str, Any]]]) -> None:
    write_manifest(tmp_path / "demo", "demo_act_residual", lerobot_runtime="0.0.1")
    assert demo.ensure_bundle("demo", tmp_path) == tmp_path / "demo"
    assert len(exports) == 1


def test_missing_export_tools_say_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def export_bundle(*args: Any, **kwargs: Any) -> None:
        raise MissingDependencyError("torch is not installed")

    monkeypatch.setattr(runtime.export.export, "export_bundle", export_bundle)
    with pytest.raises(MissingDependencyError) as e:
        demo.ensure_bundle("act", tmp_path)
    assert str(e.value) == (
        "no bundle is configured, and the built-in act bundle is exported on first use, which needs the "
        "export tools: torch is not installed; or point engine.bundle (or the BUNDLE argument) at an "
        "exported bundle"
    )
    assert isinstance(e.value.__cause__, MissingDependencyError)


@pytest.fixture
def processes(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Stands in for the checkpoint module and the export: each writes what the real one would."""
    ran: list[list[str]] = []

    def run(cmd: list[str], check: bool, stdout: Any) -> None:
        assert check and stdout is sys.stderr
        ran.append(cmd)
        if cmd[3:5] == ["export", "--lerobot"]:
            out = Path(cmd[cmd.index("--out") + 1])
            write_manifest(out, cmd[cmd.index("--name") + 1])
        else:
            assert Path(cmd[3]).parent.is_dir()  # the checkpoint goes to a temporary directory

    monkeypatch.setattr(subprocess, "run", run)
    return ran


def test_a_checkpoint_bundle_is_built_in_two_processes_into_a_new_directory(
    tmp_path: Path, processes: list[list[str]]
) -> None:
    path = demo.ensure_checkpoint_bundle(
        "rtc", "smolvla_sine", ["runtime.policies.smolvla_sine", "--steps", "3"], export_args=["--rtc"], root=tmp_path
    )
    assert path == tmp_path / "rtc"
    [checkpoint, export] = processes
    assert checkpoint[:3] == [sys.executable, "-m", "runtime.policies.smolvla_sine"]
    assert checkpoint[4:] == ["--steps", "3"]
    ckpt = checkpoint[3]
    # a temporary directory named after the bundle, so a leftover says what it was for
    assert Path(ckpt).name == "checkpoint" and Path(ckpt).parent.name.startswith("lrt-rtc-ckpt-")
    assert export == [
        sys.executable, "-m", "runtime", "export", "--lerobot", ckpt,
        "--out", str(tmp_path / "rtc.new"), "--name", "smolvla_sine", "--rtc",
    ]  # fmt: skip
    assert not Path(ckpt).exists() and not (tmp_path / "rtc.new").exists()
    assert (tmp_path / "rtc" / "manifest.json").is_file()
    # current and fit: nothing runs again
    assert demo.ensure_checkpoint_bundle("rtc", "smolvla_sine", ["m"], root=tmp_path) == path
    assert len(processes) == 2


def test_a_checkpoint_bundle_that_does_not_fit_is_rebuilt_and_the_old_one_replaced(
    tmp_path: Path, processes: list[list[str]]
) -> None:
    write_manifest(tmp_path / "field", "act_field")
    (tmp_path / "field" / "stale.txt").write_text("old")
    (tmp_path / "field.new").mkdir()  # a build that did not finish
    (tmp_path / "field.new" / "partial").write_text("")
    path = demo.ensure_checkpoint_bundle("field", "act_field", ["m"], fits=lambda m: False, root=tmp_path)
    assert [c[3] for c in processes] == [processes[0][3], "export"]
    assert not (path / "stale.txt").exists() and (path / "manifest.json").is_file()
    assert not (path / "partial").exists()  # the unfinished build was cleared first, not carried over
    assert not (tmp_path / "field.new").exists()


def test_a_checkpoint_bundle_of_another_release_is_rebuilt(tmp_path: Path, processes: list[list[str]]) -> None:
    write_manifest(tmp_path / "b", "p", lerobot_runtime="0.0.1")
    demo.ensure_checkpoint_bundle("b", "p", ["m"], root=tmp_path)
    assert len(processes) == 2
    demo.ensure_checkpoint_bundle("b", "other", ["m"], root=tmp_path)  # another policy name: rebuilt too
    assert len(processes) == 4


def test_the_store_is_where_checkpoint_bundles_go_by_default(
    env: pytest.MonkeyPatch, tmp_path: Path, processes: list[list[str]]
) -> None:
    env.setenv("LEROBOT_RUNTIME_BUNDLES", str(tmp_path / "store"))
    assert demo.ensure_checkpoint_bundle("b", "p", ["m"]) == tmp_path / "store" / "b"


def test_manifest_fields_are_what_fits_sees(tmp_path: Path, processes: list[list[str]]) -> None:
    seen: list[Manifest] = []
    write_manifest(tmp_path / "b", "p")
    demo.ensure_checkpoint_bundle("b", "p", ["m"], fits=lambda m: seen.append(m) or True, root=tmp_path)
    assert [dataclasses.replace(m, created_utc="") for m in seen] == [
        dataclasses.replace(write_manifest(tmp_path / "x", "p"), created_utc="")
    ]


def test_the_bundle_path_is_expanded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/robot")
    assert demo.resolve_bundle_path(EngineConfig(bundle="~/bundles/act")) == Path("/home/robot/bundles/act")
    assert demo.resolve_bundle_path(EngineConfig(bundle="/srv/act")) == Path("/srv/act")


def test_no_bundle_means_the_demo_bundle_and_the_rest_of_the_configuration_is_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[str] = []

    def ensure(name: str) -> Path:
        asked.append(name)
        return Path("/cache/demo")

    monkeypatch.setattr(demo, "ensure_bundle", ensure)
    config = EngineConfig(threads=1, control_cpu=0)
    assert demo.with_bundle(config) == dataclasses.replace(config, bundle="/cache/demo")
    assert asked == ["demo"]
    named = EngineConfig(bundle="/srv/act")
    assert demo.with_bundle(named) == named and asked == ["demo"]  # a named bundle is not the demo's
