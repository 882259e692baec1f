"""TD-MPC in the exported graph: LeRobot's own encoder and MPPI/CEM planner, its draws as inputs.

``predict_action_chunk`` encodes the observation and plans with LeRobot's ``TDMPCPolicy.plan``; the
program runs that code as it is, with each random draw read from a noise input (runtime.export.lerobot
.draws), so with the same noise the chunk is LeRobot's. Three of its ops are traced in another form
with the same numbers, for torch.export and OpenVINO's partitioner: the elite pick's index
(``_draws``), ``take_along_dim`` (``_gathers``) and ``torch.empty`` (``draws``). The draws, in
LeRobot's order:

* ``noise.pi``: the policy prior's exploration noise for its ``n_pi_samples`` rollouts, [horizon,
  n_pi_samples, action_dim] (``model.pi(z, min_std)``);
* ``noise.cem``: the Gaussian trajectories of each CEM iteration, [cem_iterations, horizon,
  n_gaussian_samples, action_dim];
* ``noise.terminal``: the terminal action's noise in each value estimate, [cem_iterations,
  n_gaussian_samples + n_pi_samples, action_dim];
* ``noise.ensemble``: the two Q functions picked for the terminal value ([cem_iterations, 2], uniform
  integers; only when ``q_ensemble_size > 2``);
* ``noise.elite``: the elite trajectory picked by its softmax score ([1], a categorical draw).

Two things differ from LeRobot's ``select_action`` loop and are said where they apply:

* LeRobot warm-starts each plan's CEM mean from the previous plan of the episode (``_prev_mean``);
  the program holds no state between requests, so every request plans as LeRobot's first call after
  ``reset()`` does.
* LeRobot's ``predict_action_chunk`` hands the encoder the camera under ``observation.image`` only,
  while the encoder reads it under the feature's own name, so LeRobot's own inference runs only for a
  camera named ``observation.image`` (any other name raises KeyError there); the graph gives the
  encoder both names, which is the same computation where LeRobot runs at all.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Final
from unittest import mock

import torch

from runtime.errors import ExportError
from runtime.export.lerobot.draws import Draws, drawing_from
from runtime.export.lerobot.family import Family

OBS_IMAGE: Final = "observation.image"  # where LeRobot's TD-MPC queues its one camera
OBS_STATE: Final = "observation.state"
OBS_ENV_STATE: Final = "observation.environment_state"


def _gather_along_dim(x: torch.Tensor, indices: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """``take_along_dim`` for non-negative indices, as broadcast and ``gather``."""
    if dim is None:
        return torch.take_along_dim(x, indices)
    dim = dim % x.dim()
    a = (*x.shape[:dim], 1, *x.shape[dim + 1 :])
    b = (*indices.shape[:dim], 1, *indices.shape[dim + 1 :])
    common = list(torch.broadcast_shapes(a, b))  # type: ignore[no-untyped-call]
    source, index = list(common), list(common)
    source[dim], index[dim] = x.shape[dim], indices.shape[dim]
    return torch.gather(x.expand(source), dim, indices.expand(index))


@contextlib.contextmanager
def _gathers() -> Iterator[None]:
    """``Tensor.take_along_dim`` as a plain gather while ``plan`` is traced.

    Its decomposition wraps negative indices with ``remainder``, an op OpenVINO's partitioner leaves on
    ExecuTorch's kernels (so the openvino engine could not run the program); the planner takes along
    ``topk`` indices, which are never negative, so the gather alone is the same computation.
    """

    def take_along_dim(self: torch.Tensor, indices: torch.Tensor, dim: Any = None) -> torch.Tensor:
        return _gather_along_dim(self, indices, dim)

    with mock.patch.object(torch.Tensor, "take_along_dim", take_along_dim):
        yield


class TdmpcFamily(Family):
    policy_type = "tdmpc"
    policy_class = ("lerobot.policies.tdmpc.modeling_tdmpc", "TDMPCPolicy")

    def check(self) -> None:
        cfg = self.policy.config
        if cfg.n_obs_steps != 1:
            raise ExportError(
                f"{self.checkpoint.path / 'config.json'}: field 'n_obs_steps': expected 1 (LeRobot's TD-MPC "
                f"plans from one observation), got {cfg.n_obs_steps}"
            )
        if len(cfg.image_features) > 1:
            raise ExportError(
                f"{self.checkpoint.path / 'config.json'}: field 'input_features': expected at most one VISUAL "
                f"feature (LeRobot's TD-MPC encodes one camera), got {list(cfg.image_features)}"
            )

    def _plan_steps(self) -> int:
        cfg = self.policy.config
        return int(cfg.horizon) if cfg.use_mpc else 1

    def usable_steps(self) -> int:
        cfg = self.policy.config
        # select_action executes the plan's first action n_action_repeats times when that is > 1
        return int(cfg.n_action_repeats) if cfg.n_action_repeats > 1 else self._plan_steps()

    def default_steps(self) -> int:
        cfg = self.policy.config
        return int(cfg.n_action_repeats) if cfg.n_action_repeats > 1 else int(cfg.n_action_steps)

    def noise_inputs(self) -> dict[str, tuple[int, ...]]:
        cfg = self.policy.config
        if not cfg.use_mpc:
            return {}  # the policy prior alone, without noise: nothing drawn
        h, k, a = cfg.horizon, cfg.cem_iterations, self.checkpoint.action.shape[0]
        n_pi, n_gauss = cfg.n_pi_samples, cfg.n_gaussian_samples
        out: dict[str, tuple[int, ...]] = {}
        if n_pi > 0 and cfg.min_std > 0:
            out["noise.pi"] = (h, n_pi, a)
        out["noise.cem"] = (k, h, n_gauss, a)
        if cfg.min_std > 0:
            out["noise.terminal"] = (k, n_gauss + n_pi, a)
        if cfg.q_ensemble_size > 2:
            out["noise.ensemble"] = (k, 2)
        out["noise.elite"] = (1,)
        return out

    def _draws(self, noise: dict[str, torch.Tensor]) -> Draws:
        """The noise inputs as the sequence of draws ``plan`` makes (batch of one put back)."""
        cfg = self.policy.config
        randn: list[torch.Tensor] = []
        if "noise.pi" in noise:
            randn += [noise["noise.pi"][t].unsqueeze(1) for t in range(cfg.horizon)]
        for i in range(cfg.cem_iterations):
            randn.append(noise["noise.cem"][i].unsqueeze(2))
            if "noise.terminal" in noise:
                randn.append(noise["noise.terminal"][i].unsqueeze(1))
        randint = [noise["noise.ensemble"][i] for i in range(cfg.cem_iterations)] if "noise.ensemble" in noise else []
        # plan() indexes its elites with the draw's .squeeze(): from [1, 1] that is a 0-d tensor, which
        # indexing reads as a Python int (a data-dependent value torch.export refuses). Drawn as [1, 2]
        # (the same index twice) it squeezes to a vector, the indexing is a gather, and the plan comes
        # back with the chosen trajectory twice on its batch axis; predict keeps the first.
        return Draws(
            f"TD-MPC policy {self.checkpoint.path}",
            index_copies=2,
            randn=randn,
            randint=randint,
            multinomial=[noise["noise.elite"]],
        )

    def predict(self, batch: dict[str, torch.Tensor], noise: dict[str, torch.Tensor]) -> torch.Tensor:
        from lerobot.policies.tdmpc import modeling_tdmpc

        policy = self.policy
        cfg = policy.config
        # predict_action_chunk's encoder inputs, in its order (image, environment state, state)
        obs: dict[str, torch.Tensor] = {}
        if cfg.image_features:
            camera = next(iter(cfg.image_features))
            obs[OBS_IMAGE] = obs[camera] = batch[camera]
        for key in (OBS_ENV_STATE, OBS_STATE):
            if key in batch:
                obs[key] = batch[key]
        z = policy.model.encode(obs)
        if cfg.use_mpc:
            policy._prev_mean = None  # a cold start: the program keeps no plan between requests
            try:
                with drawing_from(modeling_tdmpc, self._draws(noise)), _gathers():
                    actions = policy.plan(z)[:, :1]  # (horizon, batch, action_dim); see _draws
            finally:
                policy._prev_mean = None
        else:
            actions = policy.model.pi(z).unsqueeze(0)
        actions = torch.clamp(actions, -1, +1).transpose(0, 1)  # batch first: (1, steps, action_dim)
        if cfg.n_action_repeats > 1:
            actions = actions[:, :1].repeat(1, cfg.n_action_repeats, 1)
        return actions


FAMILY = TdmpcFamily
