"""A LeRobot ACT checkpoint, written by LeRobot's own save_pretrained, exported and served.

The served chunk is compared with LeRobot's own pipeline on the same checkpoint: the observation as
``prepare_observation_for_inference`` makes it, the preprocessor, ``predict_action_chunk`` and the
postprocessor. Skipped, with the reason, where LeRobot cannot be imported.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from runtime.export.lerobot import lerobot_available

REASON = lerobot_available()
pytestmark = [pytest.mark.export, pytest.mark.skipif(REASON is not None, reason=f"needs LeRobot: {REASON}")]

JOINTS = ("shoulder_pan.pos", "shoulder_lift.pos", "elbow_flex.pos", "wrist_flex.pos", "wrist_roll.pos", "gripper.pos")


def lerobot_chunk(checkpoint: Path, observation: dict[str, np.ndarray]) -> np.ndarray:
    """LeRobot's own inference pipeline, as its robot loop runs it."""
    import torch
    from lerobot.policies.utils import prepare_observation_for_inference

    from runtime.export.lerobot import load_checkpoint, read_checkpoint

    loaded = load_checkpoint(read_checkpoint(checkpoint))
    obs = prepare_observation_for_inference({k: v.copy() for k, v in observation.items()}, torch.device("cpu"))
    with torch.no_grad():
        chunk = loaded.postprocessor(loaded.policy.predict_action_chunk(loaded.preprocessor(obs)))
    return np.asarray(chunk[0].numpy())


def _observation(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "observation.images.front": rng.integers(0, 256, (96, 128, 3), dtype=np.uint8),
        "observation.state": (rng.normal(size=6) * 30).astype(np.float32),
    }


def _load(bundle: Path, engine: str) -> Any:
    """Load as the daemon would; on a CPU where the executorch engine computes f32 programs at bf16,
    the default load is refused (checked here) and the test goes on with the bf16 arithmetic accepted,
    held to what the engine says it computed."""
    from runtime.engine.config import EngineConfig
    from runtime.engine.loader import LoadReport, load_engine
    from runtime.errors import BundleError
    from tests.engine.arithmetic import executorch_options

    before = os.sched_getaffinity(0)
    options = executorch_options(bundle) if engine == "executorch" else {}
    try:
        if options:
            with pytest.raises(BundleError, match="the executorch engine would compute this f32 program at"):
                load_engine(EngineConfig(bundle=str(bundle), engine=engine, warmup_runs=0))  # type: ignore[arg-type]
        report = LoadReport()
        config = EngineConfig(bundle=str(bundle), engine=engine, warmup_runs=0, **options)  # type: ignore[arg-type]
        loaded = load_engine(config, report=report)
    finally:
        os.sched_setaffinity(0, before)
    return loaded, report


def _tolerance(loaded: Any) -> float:
    """The normalised tolerance for what the engine computed (f32 2e-5, bf16 0.075: the gate's defaults)."""
    from runtime.bundle.manifest import DEFAULT_TOLERANCE

    return float(DEFAULT_TOLERANCE[loaded.info.precision])


def test_manifest_speaks_lerobot(act_bundle: Path) -> None:
    m = json.loads((act_bundle / "manifest.json").read_text())
    assert [(i["name"], i["dtype"], i["shape"], i["role"]) for i in m["inputs"]] == [
        ("observation.images.front", "uint8", [96, 128, 3], "image"),
        ("observation.state", "float32", [6], "state"),
    ]
    assert m["outputs"][0]["shape"] == [20, 6]  # unbatched on the wire
    assert m["model_batch"] == 1
    assert m["action"]["names"] == list(JOINTS)
    assert m["source"]["kind"] == "lerobot" and m["source"]["policy_type"] == "act"
    # the parity scale is the action's std from the postprocessor's statistics
    from safetensors.numpy import load_file

    stats = load_file(next(act_bundle.parent.parent.glob("lerobot*/act/policy_postprocessor_step_0_*.safetensors")))
    np.testing.assert_allclose(m["test_case"]["scale"]["action"], stats["action.std"], rtol=1e-6)
    assert "std" in m["test_case"]["scale_source"]
    assert not list(act_bundle.parent.glob(".act.partial-*"))


def test_graph_is_lerobots_pipeline(act_checkpoint: Path) -> None:
    """The module torch.export traces, in eager mode, against LeRobot's own pipeline: no export."""
    import torch

    from runtime.export.lerobot import lerobot_export_plan

    factory, kwargs = lerobot_export_plan(act_checkpoint)
    graph, example = factory()
    for seed in (None, 1):
        obs = {k: v.numpy() for k, v in example.items()} if seed is None else _observation(seed)
        with torch.no_grad():
            got = graph(*(torch.from_numpy(obs[k]) for k in example)).numpy()
        want = lerobot_chunk(act_checkpoint, obs)
        assert got.shape == want.shape == (20, 6)
        err = np.abs(got - want) / np.asarray(kwargs["action_scale"])
        assert err.max() < 1e-5, f"normalised error {err.max():.3g}"
        assert np.abs(want).max() > 5  # un-normalised actions of real magnitude


@pytest.mark.parametrize("engine", ["openvino", "executorch"])
def test_served_chunk_matches_lerobot_pipeline(act_checkpoint: Path, act_bundle: Path, engine: str) -> None:
    from tests.engine.arithmetic import action_scale

    loaded, report = _load(act_bundle, engine)
    try:
        assert report.parity.ok and "action std" in report.parity.units
        for seed in (1, 2):
            obs = _observation(seed)
            got = loaded.infer(obs)["action"]
            want = lerobot_chunk(act_checkpoint, obs)
            assert got.shape == want.shape == (20, 6)
            scale = action_scale(act_bundle)
            err = np.abs(got - want) / scale
            assert err.max() < _tolerance(loaded), f"normalised error {err.max():.3g} at {loaded.info.precision}"
            assert np.abs(want).max() > 5  # un-normalised actions of real magnitude, not normalised ones
    finally:
        loaded.close()


def test_served_over_the_wire(act_checkpoint: Path, act_bundle: Path, tmp_path: Path) -> None:
    from runtime.client import PolicyClient
    from runtime.server import PolicyServer, ServerConfig

    engine, _ = _load(act_bundle, "openvino")
    obs = _observation(3)
    with (
        PolicyServer(engine, ServerConfig(endpoints=("ipc://p.sock",)), runtime_directory=tmp_path) as server,
        PolicyClient(server.bound_endpoints[0], timeout_s=10) as client,
    ):
        info = client.hello()
        assert info.action_names == JOINTS
        chunk = client.infer(obs).actions
    want = lerobot_chunk(act_checkpoint, obs)
    np.testing.assert_allclose(chunk, want, rtol=0, atol=2e-5 * 30)


@pytest.mark.parametrize("engine", ["openvino", "executorch"])
def test_the_canary_agrees_with_the_gate_on_outputs_of_tens_of_degrees(
    act_bundle: Path, tmp_path: Path, engine: str
) -> None:
    """Actions of tens of degrees, served over many canary periods: the canary judges in the same
    units as the gate that passed the program, so it never refuses a program the gate accepted."""
    import time

    from runtime.client import PolicyClient
    from runtime.server import PolicyServer, ServerConfig

    loaded, report = _load(act_bundle, engine)
    assert report.parity.ok and "action std" in report.parity.units
    assert float(np.abs(loaded.test_case.outputs["action"]).max()) > 10  # degrees, not unit-sized values
    config = ServerConfig(endpoints=("ipc://c.sock",), canary_interval_s=0.02)
    with (
        PolicyServer(loaded, config, runtime_directory=tmp_path) as server,
        PolicyClient(server.bound_endpoints[0], timeout_s=10) as client,
    ):
        deadline = time.monotonic() + 30
        while server.snapshot().verification.get("checks", 0) < 25 and time.monotonic() < deadline:
            client.infer(_observation(4))  # real requests between the checks
        v = client.stats().verification
    assert v["checks"] >= 25, v
    assert v["failed"] is False, v["failure"]
    assert v["units"] == report.parity.units and v["tolerance"] == report.parity.tolerance
    assert v["worst_max_abs_err"] <= report.parity.tolerance


def test_relative_tolerance_refuses_a_real_error(act_bundle: Path, tmp_path: Path) -> None:
    """An error of 1e-3 normalised units is refused; the log names both the error and its scale."""
    import io
    import shutil

    from runtime.bundle.bundle import sha256_bytes
    from runtime.errors import ParityError

    b = tmp_path / "b"
    shutil.copytree(act_bundle, b)
    m = json.loads((b / "manifest.json").read_text())
    with np.load(b / "test_case.npz") as npz:
        arrays = {k: npz[k] for k in npz.files}
    arrays["output/action"][5, 2] += 1e-3 * m["test_case"]["scale"]["action"][2]
    buf = io.BytesIO()
    np.savez(buf, **arrays)  # type: ignore[arg-type]
    (b / "test_case.npz").write_bytes(buf.getvalue())
    m["test_case"]["sha256"] = sha256_bytes(buf.getvalue())
    (b / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ParityError) as err:
        _load(b, "openvino")
    said = re.search(r"max abs error (\S+) in units of action std", str(err.value))
    assert said is not None, err.value
    assert float(said.group(1)) == pytest.approx(1e-3, abs=2e-5)  # the planted error, give or take f32's own
    assert "at [5, 2]" in str(err.value)


@pytest.fixture(scope="module")
def act_bundle_bf16(act_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from runtime.cli import main

    out = tmp_path_factory.mktemp("bundles") / "act_bf16"
    before = os.sched_getaffinity(0)
    args = ["export", "--lerobot", str(act_checkpoint), "--out", str(out), "--precision", "bf16"]
    status = main([*args, "--action-names", ",".join(JOINTS)])
    os.sched_setaffinity(0, before)
    assert status == 0
    return out


@pytest.mark.parametrize("engine", ["openvino", "executorch"])
def test_bf16_chunk_matches_lerobot_within_the_bf16_bound(
    act_checkpoint: Path, act_bundle_bf16: Path, engine: str
) -> None:
    loaded, report = _load(act_bundle_bf16, engine)
    try:
        m = json.loads((act_bundle_bf16 / "manifest.json").read_text())
        bound = m["test_case"]["tolerance"]["bf16"]
        assert loaded.info.precision == "bf16" and report.parity.ok and report.parity.tolerance == bound
        scale = np.asarray(m["test_case"]["scale"]["action"])
        for seed in (1, 2):
            obs = _observation(seed)
            err = np.abs(loaded.infer(obs)["action"] - lerobot_chunk(act_checkpoint, obs)) / scale
            # bf16 is in the program (an f32 one stays under 2e-5), and within its bound
            assert 2e-5 < err.max() < bound, f"normalised error {err.max():.3g}"
    finally:
        loaded.close()


@pytest.mark.parametrize("which", ["policy_preprocessor.json", "policy_postprocessor.json"])
def test_a_checkpoint_without_its_normaliser_or_unnormaliser_is_refused(
    act_checkpoint: Path, tmp_path: Path, which: str
) -> None:
    """The exporter puts both inside the graph: a checkpoint missing either is refused, naming both files."""
    import json
    import shutil

    from runtime.errors import ExportError
    from runtime.export.lerobot import load_checkpoint, read_checkpoint

    checkpoint = tmp_path / "act"
    shutil.copytree(act_checkpoint, checkpoint)
    pipeline = json.loads((checkpoint / which).read_text())
    pipeline["steps"] = [s for s in pipeline["steps"] if "normalizer" not in str(s.get("registry_name", ""))]
    (checkpoint / which).write_text(json.dumps(pipeline))
    with pytest.raises(ExportError) as err:
        load_checkpoint(read_checkpoint(checkpoint))
    assert str(err.value) == (
        f"{checkpoint}: policy_preprocessor.json has no normalizer_processor step or policy_postprocessor.json "
        "no unnormalizer_processor step; the exporter puts both inside the graph and needs them"
    )


def test_loading_a_checkpoint_keeps_lerobots_words_off_stdout(
    act_checkpoint: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """stdout belongs to a command's result (``export --json``): what LeRobot prints on loading goes to stderr."""
    from runtime.export.lerobot import load_checkpoint, read_checkpoint

    capfd.readouterr()
    load_checkpoint(read_checkpoint(act_checkpoint))
    out, err = capfd.readouterr()
    assert out == "" and "Loading weights from local directory" in err
