"""A LeRobot release other than this Python's, for the tests: its stack, checkpoints it writes, chunks it computes.

Run as a module in that release's Python (``python -m tests.engine.lerobot_release``, the repository on
``PYTHONPATH``) it computes LeRobot's own chunks with that release's classes: the observation through
``prepare_observation_for_inference`` and the preprocessor (with the task, for SmolVLA), then
``predict_action_chunk`` (with the given flow noise), then the postprocessor. The parent side starts
it, and writes checkpoints with the same release's ``save_pretrained`` (runtime.policies).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def stack_of(release: str) -> Any:
    """The Python with LeRobot ``release`` (runtime.export.lerobot.stacks), or a skip naming what installs it."""
    import pytest

    from runtime.errors import ExportError
    from runtime.export.lerobot.stacks import STACK_HINT, find_stack

    try:
        return find_stack(release)
    except ExportError:
        pytest.skip(f"needs a Python with LeRobot {release}.x: {STACK_HINT.get(release, '')}")


def run_in(stack: Any, module: str, *args: str) -> str:
    """``python -m module args`` in ``stack``'s Python; its stdout (stderr is shown on failure)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [stack.python, "-m", module, *args], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, f"{module} {args} failed in {stack.python}:\n{done.stderr[-4000:]}"
    return done.stdout


def lerobot_chunks(
    stack: Any,
    checkpoint: Path,
    observations: list[dict[str, np.ndarray]],
    work: Path,
    *,
    tasks: list[str] | None = None,
    noises: list[np.ndarray] | None = None,
    vlm: Path | None = None,
    leftovers: list[np.ndarray] | None = None,
    rtc: dict[str, int] | None = None,
) -> list[np.ndarray]:
    """LeRobot's own chunk for each observation, computed by ``stack``'s release. ``leftovers`` (in the
    action's units) with ``rtc`` (``delay``, ``horizon``): LeRobot's real-time chunking path."""
    work.mkdir(parents=True, exist_ok=True)
    for k, obs in enumerate(observations):
        extra = {"__noise__": noises[k]} if noises is not None else {}
        if leftovers is not None:
            extra["__leftover__"] = leftovers[k]
        np.savez(work / f"obs_{k}.npz", **obs, **extra)  # type: ignore[arg-type]
    spec = {
        "checkpoint": str(checkpoint),
        "n": len(observations),
        "tasks": tasks,
        "vlm": str(vlm) if vlm else None,
        "rtc": rtc,
    }
    (work / "spec.json").write_text(json.dumps(spec))
    run_in(stack, __name__, str(work))
    with np.load(work / "chunks.npz", allow_pickle=False) as got:
        return [got[str(k)] for k in range(len(observations))]


def main(work: Path) -> None:
    import torch
    from lerobot.policies.utils import prepare_observation_for_inference

    from runtime.export.lerobot import load_checkpoint, read_checkpoint

    spec = json.loads((work / "spec.json").read_text())
    loaded = load_checkpoint(read_checkpoint(spec["checkpoint"]), vlm_dir=spec["vlm"], rtc=spec["rtc"] is not None)
    chunks = {}
    for k in range(spec["n"]):
        with np.load(work / f"obs_{k}.npz", allow_pickle=False) as f:
            obs = {name: f[name] for name in f.files if not name.startswith("__")}
            noise = f["__noise__"] if "__noise__" in f.files else None
            leftover = f["__leftover__"] if "__leftover__" in f.files else None
        task = {"task": spec["tasks"][k]} if spec["tasks"] else {}
        batch = loaded.preprocessor(prepare_observation_for_inference(obs, torch.device("cpu"), **task))
        options: dict[str, Any] = {"noise": torch.from_numpy(noise).unsqueeze(0)} if noise is not None else {}
        if leftover is not None:
            # LeRobot's action queue keeps the leftover normalised
            normalised = loaded.unnormalizer._normalize_action(torch.from_numpy(leftover)[None], inverse=False)
            options.update(
                inference_delay=spec["rtc"]["delay"],
                prev_chunk_left_over=normalised,
                execution_horizon=spec["rtc"]["horizon"],
            )
        loaded.policy.reset()
        with torch.no_grad():
            chunk = loaded.postprocessor(loaded.policy.predict_action_chunk(batch, **options))
        chunks[str(k)] = chunk[0].numpy()
    np.savez(work / "chunks.npz", **chunks)  # type: ignore[arg-type]


if __name__ == "__main__":
    main(Path(sys.argv[1]))
