"""Installing a bundle: copied, verified, proven on the copy, then the link switched in one rename.

The bundles are written by hand (``tests/engine/test_bundle_integrity.py``'s programs and manifest)
and the parity gate is a stand-in for ``load_engine`` that records what it was asked: no export, no
engine.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from runtime.engine.config import EngineConfig
from runtime.engine.install import DEFAULT_BUNDLES_DIR, Installed, install_bundle
from runtime.errors import BundleError, ParityError
from tests.engine.test_bundle_integrity import CPU_PROGRAM, GPU_PROGRAM, PORTABLE, _case_bytes, _manifest, _write

TOKENIZER = b'{"a tokenizer": "definition"}'


@dataclass
class Verdict:
    text: str

    def describe(self) -> str:
        return self.text


@dataclass
class Gate:
    """Stands in for load_engine: records each config and what the bundle held, passes or raises."""

    fail: BaseException | None = None
    remove_stage: bool = False  # the staged copy gone before the gate fails
    parity: Verdict | None = field(default_factory=lambda: Verdict("max abs error 0 (tolerance 2e-05)"))
    configs: list[EngineConfig] = field(default_factory=list)
    seen: list[list[str]] = field(default_factory=list)
    pin: set[int] | None = None

    def __call__(self, config: EngineConfig, *, report: Any) -> Gate:
        self.configs.append(config)
        self.seen.append(sorted(os.listdir(config.bundle)))
        if self.pin is not None:
            os.sched_setaffinity(0, self.pin)
        if self.remove_stage:
            shutil.rmtree(config.bundle)
        if self.fail is not None:
            raise self.fail
        report.parity = self.parity
        return self

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Gate:
    g = Gate()
    monkeypatch.setattr("runtime.engine.loader.load_engine", g)
    return g


def _bundle(root: Path, name: str = "p", *, language: bool = False, portable: bool = True) -> Path:
    case = _case_bytes()
    manifest = copy.deepcopy(_manifest(case))
    manifest["policy"]["name"] = name
    files = {"program_cpu.pte": CPU_PROGRAM, "program_gpu.pte": GPU_PROGRAM, "test_case.npz": case}
    if portable:
        files["program.pt2"] = PORTABLE
    else:
        del manifest["portable_program"]
    if language:
        manifest["inputs"] += [
            {"name": "task.tokens", "dtype": "int64", "shape": [8], "role": "language"},
            {"name": "task.mask", "dtype": "bool", "shape": [8], "role": "language"},
        ]
        manifest["language"] = {
            "tokenizer": {"file": "tokenizer.json", "sha256": hashlib.sha256(TOKENIZER).hexdigest()},
            "tokens_input": "task.tokens",
            "mask_input": "task.mask",
            "max_length": 8,
        }
        files["tokenizer.json"] = TOKENIZER
    return _write(root, manifest, files)


def _name(src: Path, policy: str = "p") -> str:
    return f"{policy}-{hashlib.sha256((src / 'manifest.json').read_bytes()).hexdigest()[:12]}"


def test_the_default_bundles_directory_is_systemds_state_directory() -> None:
    assert DEFAULT_BUNDLES_DIR == "/var/lib/lerobot-runtime/bundles"


def test_a_bundle_is_copied_under_its_name_and_digest_and_current_points_at_it(
    tmp_path: Path, gate: Gate, caplog: pytest.LogCaptureFixture
) -> None:
    src = _bundle(tmp_path / "src")
    (src / "notes.txt").write_text("not named in the manifest")
    root = tmp_path / "bundles" / "nested"
    with caplog.at_level(logging.INFO, logger="runtime.engine.install"):
        installed = install_bundle(src, root)
    final = root / _name(src)
    assert installed == Installed(final, root / "current", None, "max abs error 0 (tolerance 2e-05)")
    assert sorted(os.listdir(final)) == [
        "manifest.json",
        "program.pt2",
        "program_cpu.pte",
        "program_gpu.pte",
        "test_case.npz",
    ]
    assert (final / "program_cpu.pte").read_bytes() == CPU_PROGRAM
    assert (final / "program.pt2").read_bytes() == PORTABLE
    assert os.readlink(root / "current") == final.name  # relative
    assert (final.stat().st_mode & 0o777) == 0o755
    assert sorted(os.listdir(root)) == ["current", final.name]  # nothing staged is left
    # the gate ran on the staged copy, before it had its final name
    (config,) = gate.configs
    assert Path(config.bundle).parent == root and Path(config.bundle).name.startswith(".incoming-")
    assert gate.seen == [sorted(os.listdir(final))]
    assert gate.closed
    assert caplog.messages == [f"installed {src} as {final}; {root / 'current'} now points at it (was None)"]


def test_the_gate_runs_with_the_engine_config_given_without_warmup_and_never_accepting_a_parity_failure(
    tmp_path: Path, gate: Gate
) -> None:
    engine = EngineConfig(devices=("CPU",), threads=3, warmup_runs=5, allow_parity_failure=True, parity_runs=2)
    install_bundle(_bundle(tmp_path / "src"), tmp_path / "b", engine=engine)
    (config,) = gate.configs
    assert (config.devices, config.threads, config.parity_runs) == (("CPU",), 3, 2)
    assert (config.warmup_runs, config.allow_parity_failure) == (0, False)
    install_bundle(_bundle(tmp_path / "src2", "q"), tmp_path / "b")
    assert gate.configs[1].devices == EngineConfig().devices
    assert (gate.configs[1].warmup_runs, gate.configs[1].allow_parity_failure) == (0, False)


def test_a_second_bundle_switches_the_link_and_keeps_the_first(tmp_path: Path, gate: Gate) -> None:
    root = tmp_path / "b"
    first = install_bundle(_bundle(tmp_path / "one", "one"), root)
    second = install_bundle(_bundle(tmp_path / "two", "two"), root)
    assert second.previous == first.path
    assert os.readlink(root / "current") == second.path.name
    assert first.path.is_dir()
    again = install_bundle(tmp_path / "one", root)  # roll back
    assert (again.path, again.previous) == (first.path, second.path)
    assert os.readlink(root / "current") == first.path.name


def test_a_named_link(tmp_path: Path, gate: Gate) -> None:
    installed = install_bundle(_bundle(tmp_path / "src"), tmp_path / "b", link="canary")
    assert installed.link == tmp_path / "b" / "canary"
    assert os.readlink(tmp_path / "b" / "canary") == installed.path.name
    assert not (tmp_path / "b" / "current").exists()


def test_an_installed_bundle_is_verified_and_proven_again_not_copied(tmp_path: Path, gate: Gate) -> None:
    src = _bundle(tmp_path / "src")
    root = tmp_path / "b"
    first = install_bundle(src, root)
    again = install_bundle(src, root)
    assert (again.path, again.previous) == (first.path, first.path)
    assert [Path(c.bundle) for c in gate.configs][1] == first.path
    assert sorted(os.listdir(root)) == ["current", first.path.name]


def test_an_installed_copy_altered_since_is_refused(tmp_path: Path, gate: Gate) -> None:
    src = _bundle(tmp_path / "src")
    root = tmp_path / "b"
    first = install_bundle(src, root)
    (first.path / "program_gpu.pte").write_bytes(b"changed")
    with pytest.raises(BundleError, match=r"program_gpu\.pte: sha256 .* does not match the manifest's programs\.GPU"):
        install_bundle(src, root)
    assert len(gate.configs) == 1
    assert (first.path / "program_gpu.pte").read_bytes() == b"changed"  # left for a person to look at


def test_a_damaged_source_is_refused_before_anything_is_made(tmp_path: Path, gate: Gate) -> None:
    src = _bundle(tmp_path / "src")
    (src / "program_cpu.pte").write_bytes(CPU_PROGRAM[:-1])
    with pytest.raises(BundleError, match=r"program_cpu\.pte: sha256 .* does not match"):
        install_bundle(src, tmp_path / "b")
    assert not (tmp_path / "b").exists()
    assert gate.configs == []


@pytest.mark.parametrize("error", [ParityError("outputs differ"), KeyboardInterrupt()])
def test_a_copy_failing_the_gate_is_removed_and_the_link_left_alone(
    tmp_path: Path, gate: Gate, error: BaseException
) -> None:
    root = tmp_path / "b"
    first = install_bundle(_bundle(tmp_path / "one", "one"), root)
    gate.fail = error
    with pytest.raises(type(error)):
        install_bundle(_bundle(tmp_path / "two", "two"), root)
    assert sorted(os.listdir(root)) == ["current", first.path.name]
    assert os.readlink(root / "current") == first.path.name


def test_an_installed_copy_failing_the_gate_again_is_kept(tmp_path: Path, gate: Gate) -> None:
    src = _bundle(tmp_path / "src")
    first = install_bundle(src, tmp_path / "b")
    gate.fail = ParityError("outputs differ")
    with pytest.raises(ParityError):
        install_bundle(src, tmp_path / "b")
    assert first.path.is_dir()


def test_the_callers_cpus_are_restored_after_the_gate_pins_them(tmp_path: Path, gate: Gate) -> None:
    before = os.sched_getaffinity(0)
    gate.pin = {min(before)}
    install_bundle(_bundle(tmp_path / "src"), tmp_path / "b")
    assert os.sched_getaffinity(0) == before
    gate.fail = ParityError("x")
    with pytest.raises(ParityError):
        install_bundle(_bundle(tmp_path / "src2", "q"), tmp_path / "b")
    assert os.sched_getaffinity(0) == before


def test_a_link_path_that_is_not_a_symlink_is_refused(tmp_path: Path, gate: Gate) -> None:
    root = tmp_path / "b"
    (root / "current").mkdir(parents=True)
    with pytest.raises(BundleError) as e:
        install_bundle(_bundle(tmp_path / "src"), root)
    assert str(e.value) == f"{root / 'current'} exists and is not a symlink; move it away to let install manage it"
    assert (root / "current").is_dir() and not (root / "current").is_symlink()


def test_a_dangling_link_and_a_stale_new_link_are_replaced(tmp_path: Path, gate: Gate) -> None:
    root = tmp_path / "b"
    root.mkdir()
    os.symlink("gone", root / "current")
    os.symlink("older", root / ".current.new")
    installed = install_bundle(_bundle(tmp_path / "src"), root)
    assert installed.previous == root / "gone"
    assert os.readlink(root / "current") == installed.path.name
    assert not (root / ".current.new").exists() and not (root / ".current.new").is_symlink()


def test_no_parity_result(tmp_path: Path, gate: Gate) -> None:
    gate.parity = None
    assert install_bundle(_bundle(tmp_path / "src"), tmp_path / "b").parity == "no parity result"


def test_a_bundle_without_a_portable_program(tmp_path: Path, gate: Gate) -> None:
    installed = install_bundle(_bundle(tmp_path / "src", portable=False), str(tmp_path / "b"))
    assert "program.pt2" not in os.listdir(installed.path)


def test_a_language_bundle_is_installed_with_its_tokenizer(tmp_path: Path, gate: Gate) -> None:
    installed = install_bundle(_bundle(tmp_path / "src", language=True), tmp_path / "b")
    assert (installed.path / "tokenizer.json").read_bytes() == TOKENIZER
    assert json.loads((installed.path / "manifest.json").read_text())["language"]["tokenizer"]["file"] == (
        "tokenizer.json"
    )


def test_a_staged_copy_that_differs_from_the_source_is_refused_and_removed(
    tmp_path: Path, gate: Gate, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = _bundle(tmp_path / "src")
    copy2 = shutil.copy2

    def damaging_copy(a: Path, b: Path) -> Any:
        out = copy2(a, b)
        if Path(b).name == "program_gpu.pte":
            Path(b).write_bytes(b"damaged in the copy")
        return out

    monkeypatch.setattr("runtime.engine.install.shutil.copy2", damaging_copy)
    root = tmp_path / "b"
    with pytest.raises(BundleError, match=r"/\.incoming-[^/]+/program_gpu\.pte: sha256 .* does not match"):
        install_bundle(src, root)
    assert gate.configs == []
    assert os.listdir(root) == []


def test_the_gates_error_is_raised_even_when_the_staged_copy_is_already_gone(tmp_path: Path, gate: Gate) -> None:
    gate.fail, gate.remove_stage = ParityError("outputs differ"), True
    with pytest.raises(ParityError, match=r"^outputs differ$"):
        install_bundle(_bundle(tmp_path / "src"), tmp_path / "b")
    assert os.listdir(tmp_path / "b") == []
