"""A tiny SmolVLA taught to follow a sine, for ``tools/bench/rtc.py``: smooth chunks whose direction is a coin toss.

A policy with random weights has no smooth chunks to join (the flow's noise passes into every step),
so chunk boundaries cannot be judged on it. This one is trained for a few thousand steps, with
LeRobot's own flow-matching loss, on one task: ``shoulder_pan`` follows a sine of ``period`` steps,
the other joints hold where they are. The state says where on the sine the arm is but not which way
it is going, so two continuations fit every observation, as two grasps or two paths fit a real one:
sampled afresh, consecutive chunks may take either, and the arm turns at a chunk boundary; a chunk
that continues its predecessor (real-time chunking) does not. Normalisation is mean 0, std
``std_deg`` for every joint, so a normalised unit is the same angle for state and action.

Run as ``python -m runtime.policies.smolvla_sine DIR`` (the benchmark does, in a process of its own).
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import Any, Final

from runtime.policies.smolvla_checkpoint import write_smolvla

TASK: Final = "Follow the sine with the shoulder."
CHUNK: Final = 30
PERIOD: Final = 100  # steps per turn of the sine
AMPLITUDE: Final = 1.0  # in normalised units: std_deg degrees
STD_DEG: Final = 20.0
FLOW_STEPS: Final = 5


def write_sine_smolvla(
    out: str | Path, *, steps: int = 3000, chunk: int = CHUNK, seed: int = 0, log_every: int = 500
) -> Path:
    """Write the tiny SmolVLA (real-time chunking enabled, horizon half the chunk), train it, save it."""
    import torch

    stats = {
        key: {
            "mean": torch.zeros(6),
            "std": torch.full((6,), STD_DEG),
            "min": torch.full((6,), -100.0),
            "max": torch.full((6,), 100.0),
        }
        for key in ("observation.state", "action")
    }
    path = write_smolvla(
        out,
        "tiny",
        seed=seed,
        rtc={"execution_horizon": chunk // 2},
        dataset_stats=stats,
        chunk_size=chunk,
        n_action_steps=chunk,
        num_steps=FLOW_STEPS,
    )
    train(path, steps=steps, seed=seed, log_every=log_every)
    return path


def sine_batch(n: int, chunk: int, gen: Any, tokens: Any, mask: Any) -> dict[str, Any]:
    """``n`` training samples in normalised units: a random point of the sine and its next ``chunk`` steps."""
    import torch

    phase = torch.rand(n, generator=gen) * 2 * math.pi
    state = torch.randn(n, 6, generator=gen) * 0.5
    state[:, 0] = AMPLITUDE * torch.sin(phase)
    ahead = torch.arange(1, chunk + 1)[None, :] * (2 * math.pi / PERIOD)
    action = state[:, None, :].repeat(1, chunk, 1)
    action[:, :, 0] = AMPLITUDE * torch.sin(phase[:, None] + ahead)
    return {
        "observation.images.front": torch.rand(n, 3, 96, 128, generator=gen),
        "observation.state": state,
        "action": action,
        "observation.language.tokens": tokens.repeat(n, 1),
        "observation.language.attention_mask": mask.repeat(n, 1),
    }


def train(path: Path, *, steps: int, seed: int = 0, batch: int = 32, lr: float = 2e-3, log_every: int = 500) -> None:
    """LeRobot's flow-matching loss on :func:`sine_batch`, AdamW with a cosine decay; saved in place."""
    import numpy as np
    import torch
    from lerobot.policies.utils import prepare_observation_for_inference

    from runtime.export.lerobot import load_checkpoint, read_checkpoint

    # one thread: the tiny model gains nothing from two, and two spin against whatever else runs
    torch.set_num_threads(1)
    loaded = load_checkpoint(read_checkpoint(path))
    policy = loaded.policy
    chunk = int(policy.config.chunk_size)
    blank = {"observation.images.front": np.zeros((96, 128, 3), np.uint8), "observation.state": np.zeros(6, np.float32)}
    first = dict(loaded.preprocessor(prepare_observation_for_inference(blank, torch.device("cpu"), task=TASK)))
    tokens, mask = first["observation.language.tokens"], first["observation.language.attention_mask"]
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    params = [p for p in policy.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps, eta_min=lr / 100)
    policy.train()
    started = time.monotonic()
    for step in range(steps):
        loss, _ = policy.forward(sine_batch(batch, chunk, gen, tokens, mask))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        if log_every and step % log_every == 0:
            print(f"step {step}: loss {float(loss.detach()):.4f} ({time.monotonic() - started:.0f} s)", file=sys.stderr)
    policy.eval()
    policy.save_pretrained(path)


if __name__ == "__main__":
    from runtime.export.lerobot import import_lerobot

    import_lerobot()
    args = sys.argv[1:]
    write_sine_smolvla(args[0], steps=int(args[1]) if len(args) > 1 else 3000)
