"""``lerobot-runtime serve``, ``infer``, ``keys`` and ``bench serve/canary/soak`` in process: the options,
the daemon started with its config, the observation and prefix an infer sends (random ones seeded), the
language policy's refusal, the daemon's refusal (exit 1) and silence (exit 2), what is printed, key
pairs written and never replaced without ``--force``, and the engine each benchmark serves."""

from __future__ import annotations

import json
import logging
import os
import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import runtime.bench.canary
import runtime.bench.serve
import runtime.bench.soak
import runtime.client
import runtime.commands.serve
import runtime.commands.status
import runtime.config
import runtime.daemon
import runtime.engine.loader
import runtime.export.demo
import runtime.server.synthetic
import runtime.status
from runtime.cli import build_parser, main
from runtime.engine.config import EngineConfig
from runtime.protocol.errors import BadInputError, ServerError
from tests.commands.parsers import defaults, handler, options


def _errors(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [(r.name, r.getMessage()) for r in caplog.records if r.levelno >= logging.WARNING]


# --- options -------------------------------------------------------------------------------------


def test_the_serve_infer_and_keys_options() -> None:
    root = build_parser()
    assert options("serve", root=root) == [
        ("--config", None, None, None, False, "FILE", "daemon TOML config (default: built-in defaults, demo bundle)")
    ]
    assert options("infer", root=root) == [
        (
            "--connect",
            None,
            None,
            None,
            False,
            "ENDPOINT",
            "the daemon's endpoint (default: from --config, else the defaults)",
        ),
        ("--config", None, None, None, False, "FILE", "the daemon's config, to find its endpoint"),
        (
            "--observation",
            None,
            None,
            None,
            False,
            "FILE.npz",
            "arrays named as hello's inputs (default: random ones of their shapes and dtypes, seeded)",
        ),
        (
            "--task",
            None,
            None,
            None,
            False,
            None,
            "the instruction, for a language policy (SmolVLA): needed there, refused elsewhere",
        ),
        (
            "--prefix",
            None,
            None,
            None,
            False,
            "FILE.npy",
            "real-time chunking: the previous chunk's actions not yet executed, [steps, joints] in the action's "
            "units (a .npy, or an .npz holding 'prefix'); refused by a policy without it",
        ),
        (
            "--delay",
            None,
            int,
            None,
            False,
            None,
            "real-time chunking: steps of the prefix the robot executes meanwhile (default 0)",
        ),
        ("--reset", False, None, None, False, None, "the observation starts a new episode"),
        ("--timeout-s", 30.0, float, None, False, None, "how long to wait for the chunk (default 30)"),
        ("--json", False, None, None, False, None, "print the chunk and timing as JSON"),
    ]
    assert options("keys", root=root) == [
        ("--out", None, None, None, True, "DIR", "folder to write NAME.key and NAME.key_secret"),
        ("--name", "client", None, None, False, None, "key file base name (default: client)"),
        (
            "--force",
            False,
            None,
            None,
            False,
            None,
            "replace an existing key pair (every client that trusted the old public key is locked out)",
        ),
    ]


def test_the_benchmarks_options() -> None:
    root = build_parser()
    assert options("bench", "serve", root=root) == [
        ("--json", False, None, None, False, None, "print the result as JSON"),
        (
            "--bundle",
            None,
            None,
            None,
            False,
            "DIR",
            "bundle to serve (default: an OpenVINO model built in code with ACT-size inputs and outputs)",
        ),
        ("--act", False, None, None, False, None, "serve the built-in ACT-size bundle (exported on first use)"),
        ("--control-cpu", 0, int, None, False, None, "CPU of the client process (default 0)"),
        ("--requests", 300, int, None, False, None, "measured requests per transport (default 300)"),
    ]
    assert options("bench", "canary", root=root) == [
        ("--json", False, None, None, False, None, "print the result as JSON"),
        ("--bundle", None, None, None, False, "DIR", "bundle to serve (default: the ACT-size model built in code)"),
        ("--act", False, None, None, False, None, "serve the built-in ACT-size bundle (exported on first use)"),
        ("--control-cpu", 0, int, None, False, None, "CPU of the client (default 0)"),
        ("--requests", 300, int, None, False, None, "measured requests per run (default 300)"),
        ("--checks", 100, int, None, False, None, "timed checks for the cost per check (default 100)"),
    ]
    assert options("bench", "soak", root=root) == [
        ("--minutes", 10.0, float, None, False, None, "how long the load runs (default 10)"),
        (
            "--bundle",
            "",
            None,
            None,
            False,
            "DIR",
            "serve this bundle, a synthetic camera per image input (default: the demo bundle)",
        ),
        ("--interval", 5.0, float, None, False, "S", "seconds between samples (default 5)"),
        (
            "--malloc-arena-max",
            0,
            int,
            None,
            False,
            "N",
            "start the daemon with MALLOC_ARENA_MAX=N (glibc; default: unset)",
        ),
        ("--json", False, None, None, False, None, "print the result as JSON"),
    ]
    assert defaults("keys", "--out", "k", root=root) == {
        "command": "keys",
        "out": "k",
        "name": "client",
        "force": False,
    }
    serve = runtime.commands.serve
    assert handler("serve", root=root) is serve._serve
    assert handler("infer", root=root) is serve._infer
    assert handler("keys", "--out", "k", root=root) is serve._keys
    assert handler("bench", "serve", root=root) is serve._bench_serve
    assert handler("bench", "canary", root=root) is serve._bench_canary
    assert handler("bench", "soak", root=root) is serve._bench_soak


# --- serve ---------------------------------------------------------------------------------------


def test_serve_runs_the_daemon_on_the_config_given_and_exits_with_its_status(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[Any] = []

    class Daemon:
        def __init__(self, config: Any, *, config_path: Any) -> None:
            made.append((config, config_path))

        def run(self) -> int:
            return 3

    monkeypatch.setattr(runtime.daemon, "Daemon", Daemon)
    monkeypatch.setattr(runtime.config, "load_config", lambda path: f"config of {path}")
    assert main(["serve", "--config", "/etc/d.toml"]) == 3
    assert main(["serve"]) == 3
    assert made == [("config of /etc/d.toml", "/etc/d.toml"), ("config of None", None)]


# --- infer ---------------------------------------------------------------------------------------


def _tensor(name: str, shape: tuple[int, ...], dtype: str) -> SimpleNamespace:
    return SimpleNamespace(name=name, shape=shape, dtype=dtype)


class Client:
    """A stand-in PolicyClient: ``info`` for hello, ``actions`` for the chunk, or ``fail`` raised by infer."""

    made: list[Any]
    sent: list[Any]
    info: SimpleNamespace
    actions: np.ndarray
    fail: BaseException | None

    def __init__(self, endpoint: str, timeout_s: float) -> None:
        self.made.append((endpoint, timeout_s))

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def hello(self) -> SimpleNamespace:
        return self.info

    def infer(self, observation: dict[str, np.ndarray], **kw: Any) -> SimpleNamespace:
        self.sent.append((observation, kw))
        if self.fail is not None:
            raise self.fail
        timing = SimpleNamespace(queue_ms=0.25, infer_ms=4.25, total_ms=5.0)
        return SimpleNamespace(actions=self.actions, timing=timing, round_trip_ms=6.75)


@pytest.fixture
def daemon(monkeypatch: pytest.MonkeyPatch) -> type[Client]:
    Client.made, Client.sent, Client.fail = [], [], None
    Client.info = SimpleNamespace(
        policy_name="act",
        inputs=(_tensor("observation.state", (3,), "float32"), _tensor("observation.images.front", (8, 8, 3), "uint8")),
        takes_task=False,
        action_names=("shoulder", "elbow"),
    )
    Client.actions = np.array([[0.5, -1.25], [0.0, 2.0], [1.0, 1.0]], dtype=np.float32)
    monkeypatch.setattr(runtime.client, "PolicyClient", Client)
    configs: list[Any] = []
    monkeypatch.setattr(runtime.config, "load_config", lambda path: configs.append(path) or f"config of {path}")
    monkeypatch.setattr(runtime.status, "status_endpoint", lambda config: f"ipc:///run/{config}.sock")
    monkeypatch.setattr(runtime.commands.status, "DEFAULT_CONFIG", "/nonexistent/config.toml")
    Client.configs = configs  # type: ignore[attr-defined]
    return Client


def test_infer_sends_seeded_random_inputs_of_hellos_shapes_and_prints_the_first_step(
    daemon: type[Client], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["infer"]) == 0
    assert daemon.made == [("ipc:///run/config of None.sock", 30.0)]
    ((observation, kw),) = daemon.sent
    assert kw == {"reset": False, "task": None, "prefix": None, "delay": None}
    rng = np.random.default_rng(0)
    state = rng.standard_normal((3,)).astype("float32")
    image = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
    assert list(observation) == ["observation.state", "observation.images.front"]
    assert observation["observation.state"].dtype == np.float32
    np.testing.assert_array_equal(observation["observation.state"], state)
    assert observation["observation.images.front"].dtype == np.uint8
    np.testing.assert_array_equal(observation["observation.images.front"], image)
    assert capsys.readouterr().out == "act: 3 x 2 in 6.8 ms (infer 4.2)\n  first step: shoulder=0.500, elbow=-1.250\n"


def test_infer_sends_the_observation_file_and_options_to_the_endpoint_asked(
    daemon: type[Client], tmp_path: Path
) -> None:
    obs = tmp_path / "obs.npz"
    np.savez(obs, **{"observation.state": np.arange(3, dtype=np.float32)})
    argv = ["--connect", "tcp://10.0.0.2:5555", "--observation", str(obs), "--reset", "--task", "pick", "--delay", "2"]
    assert main(["infer", *argv, "--timeout-s", "1.5"]) == 0
    assert daemon.made == [("tcp://10.0.0.2:5555", 1.5)]
    ((observation, kw),) = daemon.sent
    assert list(observation) == ["observation.state"]
    np.testing.assert_array_equal(observation["observation.state"], [0.0, 1.0, 2.0])
    assert kw == {"reset": True, "task": "pick", "prefix": None, "delay": 2}
    assert daemon.configs == []  # type: ignore[attr-defined]


def test_the_endpoint_comes_from_the_config_given_else_the_installed_one(
    daemon: type[Client], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["infer", "--config", "d.toml"]) == 0
    installed = tmp_path / "config.toml"
    installed.write_text("")
    monkeypatch.setattr(runtime.commands.status, "DEFAULT_CONFIG", str(installed))
    assert main(["infer"]) == 0
    assert daemon.configs == ["d.toml", str(installed)]  # type: ignore[attr-defined]
    assert [m[0] for m in daemon.made] == ["ipc:///run/config of d.toml.sock", f"ipc:///run/config of {installed}.sock"]


def test_a_prefix_is_read_from_a_npy_or_from_prefix_in_a_npz(daemon: type[Client], tmp_path: Path) -> None:
    np.save(tmp_path / "p.npy", np.full((2, 2), 0.5, dtype=np.float32))
    np.savez(tmp_path / "p.npz", prefix=np.full((1, 2), 2.0, dtype=np.float32), other=np.zeros(1))
    assert main(["infer", "--prefix", str(tmp_path / "p.npy"), "--delay", "1"]) == 0
    assert main(["infer", "--prefix", str(tmp_path / "p.npz")]) == 0
    np.testing.assert_array_equal(daemon.sent[0][1]["prefix"], [[0.5, 0.5], [0.5, 0.5]])
    np.testing.assert_array_equal(daemon.sent[1][1]["prefix"], [[2.0, 2.0]])


def test_a_pickled_prefix_is_not_loaded(daemon: type[Client], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    np.save(tmp_path / "p.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    assert main(["infer", "--prefix", str(tmp_path / "p.npy")]) == 1
    assert daemon.sent == []
    assert _errors(caplog) == [
        ("runtime.cli", "infer failed: ValueError: Object arrays cannot be loaded when allow_pickle=False")
    ]


def test_a_language_policy_needs_a_task(daemon: type[Client], caplog: pytest.LogCaptureFixture) -> None:
    daemon.info.takes_task = True
    daemon.info.policy_name = "smolvla"
    assert main(["infer"]) == 2
    assert daemon.sent == []
    assert _errors(caplog) == [
        ("runtime.commands.serve", 'smolvla is a language policy: pass --task "..." (the instruction it follows)')
    ]
    assert main(["infer", "--task", ""]) == 0  # an empty task is the server's to judge
    assert daemon.sent[0][1]["task"] == ""


def test_json_prints_the_chunk_with_its_names_and_timing(
    daemon: type[Client], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["infer", "--json", "--task", "pick"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out) == {
        "policy": "act",
        "task": "pick",
        "action_names": ["shoulder", "elbow"],
        "actions": [[0.5, -1.25], [0.0, 2.0], [1.0, 1.0]],
        "timing_ms": {"queue": 0.25, "infer": 4.25, "round_trip": 6.75},
    }
    assert out.startswith('{\n  "policy": "act",\n')


@pytest.mark.parametrize(
    ("error", "status", "line"),
    [
        (
            BadInputError("observation.state: expected float32, got float64"),
            1,
            "the daemon refused the observation: [bad_input] observation.state: expected float32, got float64",
        ),
        (ServerError("no"), 1, "the daemon refused the observation: [error] no"),
        (
            TimeoutError("no reply in 30 s"),
            2,
            "no daemon answers at ipc:///run/config of None.sock (no reply in 30 s): is it running?",
        ),
        (
            ConnectionResetError("reset"),
            2,
            "no daemon answers at ipc:///run/config of None.sock (reset): is it running?",
        ),
    ],
)
def test_a_refusal_is_exit_1_and_silence_exit_2(
    error: BaseException,
    status: int,
    line: str,
    daemon: type[Client],
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    daemon.fail = error
    assert main(["infer"]) == status
    assert _errors(caplog) == [("runtime.commands.serve", line)]
    assert capsys.readouterr().out == ""


# --- keys ----------------------------------------------------------------------------------------


def test_keys_writes_a_private_pair_in_a_private_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "keys" / "deep"
    assert main(["keys", "--out", str(out)]) == 0
    public, secret = out / "client.key", out / "client.key_secret"
    assert "public-key" in public.read_text() and "secret-key" in secret.read_text()
    assert stat.S_IMODE(os.stat(secret).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o700
    assert capsys.readouterr().out == (
        f"public key: {public}\nsecret key: {secret}\n"
        "give the public .key file to the other side; keep the .key_secret file private\n"
    )
    assert main(["keys", "--out", str(out), "--name", "server"]) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "client.key",
        "client.key_secret",
        "server.key",
        "server.key_secret",
    ]


def test_keys_never_replace_a_pair_without_force(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert main(["keys", "--out", str(tmp_path), "--name", "server"]) == 0
    before = (tmp_path / "server.key_secret").read_text()
    assert main(["keys", "--out", str(tmp_path), "--name", "server"]) == 78
    assert (tmp_path / "server.key_secret").read_text() == before
    (tmp_path / "server.key").unlink()
    assert main(["keys", "--out", str(tmp_path), "--name", "server"]) == 78
    assert [m for _, m in _errors(caplog)] == [
        f"keys: {tmp_path}/server.key and {tmp_path}/server.key_secret already exist; replacing a server's secret "
        "locks out every client that trusts its public key. Choose another --name or --out, or pass --force",
        f"keys: {tmp_path}/server.key_secret already exist; replacing a server's secret "
        "locks out every client that trusts its public key. Choose another --name or --out, or pass --force",
    ]
    assert main(["keys", "--out", str(tmp_path), "--name", "server", "--force"]) == 0
    assert (tmp_path / "server.key_secret").read_text() != before


def test_keys_that_cannot_be_written_are_refused_naming_the_folder(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "keys"
    assert main(["keys", "--out", str(out)]) == 78
    assert [m for _, m in _errors(caplog)] == [f"keys: cannot write the key pair into --out {out}: Not a directory"]


# --- benchmarks ----------------------------------------------------------------------------------


@pytest.fixture
def engines(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Stand-ins for what a benchmark's engine is made of: the synthetic model and the loader."""
    made: list[Any] = []

    class Synthetic:
        def __init__(self, spec: Any) -> None:
            made.append(("synthetic", spec))

    monkeypatch.setattr(runtime.server.synthetic, "SyntheticEngine", Synthetic)
    observation = {"obs": np.ones(2)}

    def example_observation(spec: Any) -> dict[str, np.ndarray]:
        made.append(("example", spec))
        return observation

    def reference_actions(spec: Any, obs: Any) -> np.ndarray:
        made.append(("reference", spec, obs is observation))
        return np.full(2, 7.0)

    monkeypatch.setattr(runtime.server.synthetic, "example_observation", example_observation)
    monkeypatch.setattr(runtime.server.synthetic, "reference_actions", reference_actions)
    monkeypatch.setattr(
        runtime.engine.loader, "load_engine", lambda config: made.append(("loaded", config)) or "engine"
    )
    monkeypatch.setattr(runtime.export.demo, "ensure_bundle", lambda name: Path(f"/store/{name}"))
    return made


def test_bench_serve_serves_the_model_built_in_code_with_its_reference_as_test_case(
    engines: list[Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    runs: list[Any] = []

    def run_bench(make: Any, **kw: Any) -> dict[str, Any]:
        runs.append((make(), kw))
        return {"rows": 1}

    monkeypatch.setattr(runtime.bench.serve, "run_bench", run_bench)
    monkeypatch.setattr(runtime.bench.serve, "format_table", lambda result: f"table {result}")
    assert main(["bench", "serve"]) == 0
    ((engine, kw),) = runs
    assert kw == {"n": 300, "control_cpu": 0}
    act = runtime.server.synthetic.ACT
    assert engines == [("example", act), ("reference", act, True), ("synthetic", act)]
    case = engine.test_case
    assert list(case.inputs) == ["obs"] and case.tolerance == {"f32": 1e-4}
    assert list(case.outputs) == [runtime.server.synthetic.ACTION]
    np.testing.assert_array_equal(case.outputs[runtime.server.synthetic.ACTION], [7.0, 7.0])
    assert main(["bench", "serve", "--requests", "5", "--control-cpu", "1", "--json"]) == 0
    assert runs[1][1] == {"n": 5, "control_cpu": 1}
    assert capsys.readouterr().out == "table {'rows': 1}\n{\n  \"rows\": 1\n}\n"


def test_bench_serve_loads_a_bundle_or_the_act_bundle_on_the_cpu(
    engines: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runtime.bench.serve, "run_bench", lambda make, **kw: {"engine": make()})
    monkeypatch.setattr(runtime.bench.serve, "format_table", str)
    assert main(["bench", "serve", "--bundle", "/b", "--control-cpu", "1"]) == 0
    assert main(["bench", "serve", "--act"]) == 0
    assert engines == [
        ("loaded", EngineConfig(bundle="/b", devices=("CPU",), control_cpu=1)),
        ("loaded", EngineConfig(bundle="/store/act", devices=("CPU",), control_cpu=0)),
    ]


def test_bench_canary_runs_with_the_counts_given(
    engines: list[Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    runs: list[Any] = []
    monkeypatch.setattr(runtime.bench.canary, "run_bench", lambda make, **kw: runs.append((make(), kw)) or {"r": 2})
    monkeypatch.setattr(runtime.bench.canary, "format_table", lambda result: f"table {result}")
    assert main(["bench", "canary"]) == 0
    assert main(["bench", "canary", "--act", "--requests", "9", "--checks", "3", "--control-cpu", "1", "--json"]) == 0
    assert [kw for _, kw in runs] == [
        {"requests": 300, "checks": 100, "control_cpu": 0},
        {"requests": 9, "checks": 3, "control_cpu": 1},
    ]
    assert engines[-1] == ("loaded", EngineConfig(bundle="/store/act", devices=("CPU",), control_cpu=1))
    assert capsys.readouterr().out == "table {'r': 2}\n{\n  \"r\": 2\n}\n"


def test_bench_soak_runs_with_the_settings_given(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    runs: list[Any] = []
    monkeypatch.setattr(runtime.bench.soak, "run_soak_bench", lambda **kw: runs.append(kw) or {"s": 3})
    monkeypatch.setattr(runtime.bench.soak, "format_table", lambda result: f"table {result}")
    assert main(["bench", "soak"]) == 0
    argv = ["--minutes", "0.5", "--interval", "1", "--malloc-arena-max", "2", "--bundle", "/b", "--json"]
    assert main(["bench", "soak", *argv]) == 0
    assert runs == [
        {"minutes": 10.0, "interval_s": 5.0, "malloc_arena_max": 0, "bundle": ""},
        {"minutes": 0.5, "interval_s": 1.0, "malloc_arena_max": 2, "bundle": "/b"},
    ]
    assert capsys.readouterr().out == "table {'s': 3}\n{\n  \"s\": 3\n}\n"


def test_a_chunk_whose_columns_hello_does_not_name_one_for_one_is_not_printed_half_named(
    daemon: type[Client], caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    daemon.info.action_names = ("shoulder",)
    assert main(["infer"]) == 1
    assert capsys.readouterr().out == "act: 3 x 2 in 6.8 ms (infer 4.2)\n"
    assert _errors(caplog) == [("runtime.cli", "infer failed: ValueError: zip() argument 2 is longer than argument 1")]
