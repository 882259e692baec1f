"""SmolVLA in the exported graph: LeRobot's ``predict_action_chunk``, the task's tokens and the flow noise as inputs.

The program is LeRobot's inference for one observation: each camera resized with padding and scaled
to [-1, 1] (``prepare_images``), the state padded to ``max_state_dim``, the VLM prefix (SigLIP-style
vision encoder, pixel-shuffle connector, the language embeddings, the state projection) run once to
fill the key/value cache, then ``num_steps`` Euler steps of flow matching through the action expert,
unrolled (the timesteps are Python floats), LeRobot's own code throughout.

Inputs beside the cameras and the state:

* ``observation.language.tokens`` (int64 ``[tokenizer_max_length]``) and
  ``observation.language.attention_mask`` (bool, same length): the task string as LeRobot's
  preprocessor tokenizes it (runtime.bundle.tokenizer), padded to the maximum length; the server fills
  them from the request's ``task``. A padded token is masked out of every attention and does not move
  the position ids, so padding to the maximum computes the numbers LeRobot's ``padding="longest"``
  does (the parity tests compare exactly that).
* ``noise`` (float32 ``[chunk_size, max_action_dim]``): the flow's initial sample, which LeRobot draws
  with ``torch.normal`` when none is given; the server draws it per request, as for Diffusion Policy.

With real-time chunking (``rtc_config.enabled``, or ``export --rtc``) three more, filled by the server
from a request's leftover and delay (runtime.server.rtc):

* ``rtc.prefix`` (float32 ``[chunk_size, action_dim]``): the previous chunk's leftover in the action's
  units, normalised in the graph and padded to ``max_action_dim`` with zeros as LeRobot pads it;
* ``rtc.prefix_weights`` (float32 ``[chunk_size]``): LeRobot's ``get_prefix_weights`` for the delay,
  the horizon and the schedule (runtime.bundle.rtc); all zero, the flow samples as without RTC;
* ``rtc.max_guidance_weight`` (float32 ``[1]``): LeRobot's cap on the guidance weight.

Each flow step is then LeRobot's ``RTCProcessor.denoise_step`` in closed form (``_guided_step``).
LeRobot computes its correction with ``torch.autograd.grad`` of ``x1_t = x_t - time * v_t`` with
respect to ``x_t``, but evaluates the denoiser before ``x_t`` requires its gradient, so ``v_t`` is a
constant to autograd and the correction is the weighted error itself: no gradient through the
denoiser is part of LeRobot's numbers, and the step is plain arithmetic that torch.export takes
(``torch.autograd.grad`` it refuses). ``check`` compares the closed form with LeRobot's own
``denoise_step`` before tracing, so a LeRobot release that computes it another way is refused.

Two pieces are traced in another form with the same numbers, each checked against the original
before tracing (``check``):

* the vision embeddings' position ids. SmolVLM computes them per image from its patch mask
  (``arange`` over the mask's sum, ``bucketize``, a boolean-indexed write: data-dependent shapes
  torch.export refuses); LeRobot always passes the full mask, for which the ids are a constant,
  computed with SmolVLM's own code;
* LeRobot counts its padding masks with ``torch.sum`` and ``torch.cumsum`` of booleans (int64 results),
  which OpenVINO's converter refuses ("Element type of data input must be numeric"); the masks are
  counted in float32 (exact far beyond any sequence length: 2**24) and the counts cast to int64, the
  same counts (and no int64 reduction, which OpenVINO's CPU plugin computes in 32 bits); and
  ``make_att_2d_masks`` multiplies two boolean masks, which OpenVINO's Multiply refuses for
  booleans: a logical and, the same mask;
* the cameras' bilinear resize (``F.interpolate`` in ``resize_with_pad``): ExecuTorch's OpenVINO
  partitioner keeps ``upsample_bilinear2d`` whole but OpenVINO 2025.4.1's PyTorch frontend does not
  take it, so the op would be left to no kernel at all. For a fixed image size a bilinear resize is
  two fixed linear maps, one per axis; their matrices are computed with ``F.interpolate`` itself
  (applied to identity matrices) before tracing and the resize is two matrix products, the same
  weights summed in another order (differences of float rounding, checked to stay below 1e-5 of the
  [0, 1] pixel range);
* LeRobot's ``apply_rope`` writes its two halves into ``torch.empty_like`` of a strided view, which
  exports as ``aten.empty_permuted``, an op outside the core ATen set ExecuTorch lowers; the same two
  halves are concatenated instead.
"""

from __future__ import annotations

import contextlib
import importlib
import math
from collections.abc import Callable, Iterator
from typing import Any, Final
from unittest import mock

import numpy as np
import torch

from runtime.errors import ExportError
from runtime.export.lerobot.family import Family

OBS_LANGUAGE_TOKENS: Final = "observation.language.tokens"
OBS_LANGUAGE_MASK: Final = "observation.language.attention_mask"
NOISE_INPUT: Final = "noise"
PREFIX_INPUT: Final = "rtc.prefix"
WEIGHTS_INPUT: Final = "rtc.prefix_weights"
GUIDANCE_INPUT: Final = "rtc.max_guidance_weight"
# the test case's leftover: this many actions of the previous plan left, the next chunk this late
EXAMPLE_LEFTOVER_FRACTION: Final = 0.6
EXAMPLE_DELAY: Final = 2
# the bundle's test case asks for this task (any task would do: it is what the parity replay runs)
EXAMPLE_TASK: Final = "Pick up the red cube and place it in the box."


def _full_mask_position_ids(embeddings: Any, batch: int, height: int, width: int) -> torch.Tensor:
    """SmolVLM's vision position ids for a full patch mask, by SmolVLM's own forward (eager, not traced)."""
    seen: list[torch.Tensor] = []
    original = embeddings.position_embedding.forward

    def capture(ids: torch.Tensor) -> torch.Tensor:
        seen.append(ids.clone())
        out: torch.Tensor = original(ids)
        return out

    pixels = torch.zeros(batch, embeddings.patch_embedding.in_channels, height, width)
    mask = torch.ones(batch, height // embeddings.patch_size, width // embeddings.patch_size, dtype=torch.bool)
    with torch.no_grad(), mock.patch.object(embeddings.position_embedding, "forward", capture):
        embeddings(pixel_values=pixels, patch_attention_mask=mask)
    return seen[0]


def _apply_rope(x: torch.Tensor, positions: torch.Tensor, max_wavelength: int = 10_000) -> torch.Tensor:
    """LeRobot's ``apply_rope`` (smolvlm_with_expert.py), its halves concatenated instead of written."""
    d_half = x.shape[-1] // 2
    dtype = x.dtype
    x = x.to(torch.float32)
    freq_exponents = (2.0 / x.shape[-1]) * torch.arange(d_half, dtype=torch.float32, device=x.device)
    timescale = max_wavelength**freq_exponents
    radians = positions[..., None].to(torch.float32) / timescale[None, None, :].to(torch.float32)
    radians = radians[..., None, :]
    sin, cos = torch.sin(radians), torch.cos(radians)
    x1, x2 = x[..., :d_half], x[..., d_half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(dtype)


def _check_rope(original: Any) -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1, 7, 3, 16, generator=gen).transpose(1, 2).transpose(1, 2)  # a strided view, as traced
    positions = torch.arange(7).unsqueeze(0)
    if not torch.equal(_apply_rope(x, positions), original(x, positions)):
        raise ExportError("SmolVLA: apply_rope as traced differs from LeRobot's; this LeRobot release changed it")


class _MatrixResize:
    """``torch.nn.functional`` as LeRobot's SmolVLA module sees it while traced: bilinear resizes of the
    sizes recorded before tracing as two matrix products, everything else F's own."""

    def __init__(self) -> None:
        self.matrices: dict[tuple[int, int, int, int], tuple[torch.Tensor, torch.Tensor]] = {}
        self.recording = False

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.nn.functional, name)

    def interpolate(
        self, x: torch.Tensor, size: Any = None, mode: str = "nearest", align_corners: Any = None, **kwargs: Any
    ) -> torch.Tensor:
        if mode != "bilinear" or align_corners or kwargs or size is None:
            return torch.nn.functional.interpolate(x, size=size, mode=mode, align_corners=align_corners, **kwargs)
        key = (x.shape[-2], x.shape[-1], int(size[0]), int(size[1]))
        if self.recording:
            self.matrices[key] = _resize_matrices(*key)
            out: torch.Tensor = torch.nn.functional.interpolate(x, size=size, mode=mode, align_corners=align_corners)
            return out
        if key not in self.matrices:
            raise ExportError(f"SmolVLA: a bilinear resize {key[:2]} -> {key[2:]} that was not prepared before tracing")
        rows, cols = self.matrices[key]
        return torch.matmul(torch.matmul(rows, x), cols)


def _resize_matrices(in_h: int, in_w: int, out_h: int, out_w: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The row map (out_h x in_h) and the transposed column map (in_w x out_w) of a bilinear resize."""
    f = torch.nn.functional
    with torch.no_grad():
        # resizing one axis of an identity matrix leaves the other untouched (scale 1 is exact)
        rows = f.interpolate(torch.eye(in_h)[None, None], size=(out_h, in_h), mode="bilinear", align_corners=False)
        cols = f.interpolate(torch.eye(in_w)[None, None], size=(in_w, out_w), mode="bilinear", align_corners=False)
    return rows[0, 0].contiguous(), cols[0, 0].contiguous()


class _TorchCountingInIntegers:
    """``torch`` as LeRobot's SmolVLA module sees it while traced: boolean masks counted in float32, the
    counts int64 as torch's own sums of booleans are."""

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    @staticmethod
    def sum(x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if x.dtype != torch.bool:
            return torch.sum(x, *args, **kwargs)
        return torch.sum(x.to(torch.float32), *args, **kwargs).to(torch.int64)

    @staticmethod
    def cumsum(x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if x.dtype != torch.bool:
            return torch.cumsum(x, *args, **kwargs)
        return torch.cumsum(x.to(torch.float32), *args, **kwargs).to(torch.int64)


def _make_att_2d_masks(pad_masks: torch.Tensor, att_masks: torch.Tensor) -> torch.Tensor:
    """LeRobot's ``make_att_2d_masks`` (modeling_smolvla.py) with a logical and for the boolean product."""
    if att_masks.ndim != 2 or pad_masks.ndim != 2:
        raise ValueError((att_masks.ndim, pad_masks.ndim))
    cumsum = _TorchCountingInIntegers.cumsum(att_masks, dim=1)
    att_2d_masks = cumsum[:, None, :] <= cumsum[:, :, None]
    pad_2d_masks = pad_masks[:, None, :] & pad_masks[:, :, None]
    return att_2d_masks & pad_2d_masks


def _check_masks(original: Any) -> None:
    gen = torch.Generator().manual_seed(0)
    pad = torch.rand(2, 9, generator=gen) > 0.3
    for att in (torch.rand(2, 9, generator=gen) > 0.5, (torch.rand(2, 9, generator=gen) > 0.5).float()):
        if not torch.equal(_make_att_2d_masks(pad, att), original(pad, att)):
            raise ExportError(
                "SmolVLA: make_att_2d_masks as traced differs from LeRobot's; this LeRobot release changed it"
            )


def resize_module() -> Any:
    """The module whose ``F.interpolate`` SmolVLA's ``resize_with_pad`` calls: LeRobot 0.4 defines it in
    ``modeling_smolvla``, 0.6 in ``policies.common.vla_utils``."""
    from lerobot.policies.smolvla import modeling_smolvla

    return importlib.import_module(modeling_smolvla.resize_with_pad.__module__)


@contextlib.contextmanager
def _traceable(embeddings: Any, position_ids: torch.Tensor, resize: _MatrixResize) -> Iterator[None]:
    from lerobot.policies.smolvla import modeling_smolvla, smolvlm_with_expert

    with (
        mock.patch.object(resize_module(), "F", resize),
        _static_vision_positions(embeddings, position_ids),
        mock.patch.object(smolvlm_with_expert, "apply_rope", _apply_rope),
        mock.patch.object(modeling_smolvla, "torch", _TorchCountingInIntegers()),
        mock.patch.object(modeling_smolvla, "make_att_2d_masks", _make_att_2d_masks),
    ):
        yield


@contextlib.contextmanager
def _static_vision_positions(embeddings: Any, position_ids: torch.Tensor) -> Iterator[None]:
    """SmolVLM's vision embeddings with the full-mask position ids as a constant, while traced."""

    def forward(pixel_values: torch.Tensor, patch_attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        patches = embeddings.patch_embedding(pixel_values).flatten(2).transpose(1, 2)
        out: torch.Tensor = patches + embeddings.position_embedding(position_ids)
        return out

    with mock.patch.object(embeddings, "forward", forward):
        yield


def _guidance_weight(time: float, cap: torch.Tensor) -> torch.Tensor:
    """LeRobot's guidance weight at flow time ``time`` (1 -> 0), capped at ``cap``.

    Its part that depends on ``time`` alone is a constant of the graph, computed here in float32 as
    LeRobot computes it (``torch.as_tensor(tau)``, float32 arithmetic in the same order)."""
    tau = np.float32(1 - time)
    if tau == 0:  # LeRobot: c = inf, nan_to_num(posinf=cap) -> cap, and cap * inv_r2 (= 1) -> cap
        return cap
    one = np.float32(1)
    squared_one_minus_tau = (one - tau) * (one - tau)
    inv_r2 = (squared_one_minus_tau + tau * tau) / squared_one_minus_tau
    return cap.clamp(max=float((one - tau) / tau * inv_r2))


def _guided_step(
    x_t: torch.Tensor,
    time: float,
    denoise: Any,
    prev: Callable[[], torch.Tensor],
    weights: torch.Tensor,
    cap: torch.Tensor,
) -> torch.Tensor:
    """LeRobot's ``RTCProcessor.denoise_step`` with the correction in closed form (see the module's doc).
    ``prev()``: the leftover, normalised and padded to ``x_t``'s shape."""
    v_t: torch.Tensor = denoise(x_t)
    x1_t = x_t - time * v_t
    correction = (prev() - x1_t) * weights.reshape(1, -1, 1)
    return v_t - _guidance_weight(time, cap) * correction


def _check_guidance(rtc_config: Any) -> None:
    """The closed form against LeRobot's own ``denoise_step`` (autograd and all), on a nonlinear denoiser."""
    from lerobot.policies.rtc.configuration_rtc import RTCConfig
    from lerobot.policies.rtc.modeling_rtc import RTCProcessor
    from runtime.bundle.rtc import prefix_weights

    gen = torch.Generator().manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Tanh(), torch.nn.Linear(16, 5))
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))
    config = RTCConfig(
        enabled=True,
        prefix_attention_schedule=rtc_config.prefix_attention_schedule,
        max_guidance_weight=float(rtc_config.max_guidance_weight),
        execution_horizon=int(rtc_config.execution_horizon),
    )
    processor = RTCProcessor(config)
    chunk, steps, delay = 8, 6, 2
    x_t = torch.randn(1, chunk, 5, generator=gen)
    leftover = torch.randn(1, steps, 4, generator=gen)
    prev = torch.zeros(1, chunk, 5)
    prev[:, :steps, :4] = leftover
    schedule = str(getattr(config.prefix_attention_schedule, "value", config.prefix_attention_schedule))
    weights = torch.from_numpy(prefix_weights(delay, config.execution_horizon, chunk, schedule, steps))
    cap = torch.tensor([config.max_guidance_weight])
    for time in (1.0, 0.7, 0.4, 0.1):
        want = processor.denoise_step(x_t, leftover, delay, time, net).detach()
        with torch.no_grad():
            got = _guided_step(x_t, time, net, lambda: prev, weights, cap)
        error = float((got - want).abs().max())
        if not error <= 1e-5 * (1 + float(want.abs().max())):
            raise ExportError(
                f"SmolVLA RTC: LeRobot's guided denoise step differs from the exported one by {error:.3g} at time "
                f"{time}; this LeRobot release computes the guidance another way"
            )


def _appends_newline(steps: Any) -> bool:
    """Whether the preprocessor ends the task with a newline, asked of its steps rather than of their class
    names (LeRobot 0.4 calls the step ``SmolVLANewLineProcessor``, 0.6 ``NewLineTaskProcessorStep``)."""
    for step in steps:
        complementary = getattr(step, "complementary_data", None)
        if callable(complementary) and complementary({"task": "a task"}).get("task") == "a task\n":
            return True
    return False


class SmolvlaFamily(Family):
    policy_type = "smolvla"
    policy_class = ("lerobot.policies.smolvla.modeling_smolvla", "SmolVLAPolicy")

    def __init__(self, loaded: Any) -> None:
        super().__init__(loaded)
        self.position_ids: torch.Tensor | None = None
        self.resize = _MatrixResize()

    def _vision_embeddings(self) -> Any:
        return self.policy.model.vlm_with_expert.get_vlm_model().vision_model.embeddings

    @property
    def rtc_enabled(self) -> bool:
        cfg = self.policy.config.rtc_config
        return cfg is not None and bool(cfg.enabled)

    def _rtc_fields(self) -> tuple[int, str, float]:
        cfg = self.policy.config.rtc_config
        schedule = str(getattr(cfg.prefix_attention_schedule, "value", cfg.prefix_attention_schedule))
        return int(cfg.execution_horizon), schedule, float(cfg.max_guidance_weight)

    def _check_rtc(self) -> None:
        from runtime.bundle.rtc import SCHEDULES

        where = self.checkpoint.path / "config.json"
        horizon, schedule, cap = self._rtc_fields()
        if horizon < 1:
            raise ExportError(f"{where}: field 'rtc_config.execution_horizon': expected >= 1 step, got {horizon}")
        if schedule not in SCHEDULES:
            raise ExportError(
                f"{where}: field 'rtc_config.prefix_attention_schedule': expected one of {', '.join(SCHEDULES)}, "
                f"got {schedule!r}"
            )
        if not (cap > 0 and math.isfinite(cap)):
            raise ExportError(f"{where}: field 'rtc_config.max_guidance_weight': expected > 0, got {cap}")
        _check_guidance(self.policy.config.rtc_config)

    def check(self) -> None:
        cfg = self.policy.config
        where = self.checkpoint.path / "config.json"
        if self.rtc_enabled:
            self._check_rtc()
        if cfg.adapt_to_pi_aloha:
            raise ExportError(f"{where}: field 'adapt_to_pi_aloha': expected false (Aloha's conversions), got true")
        if cfg.empty_cameras:
            raise ExportError(
                f"{where}: field 'empty_cameras': expected 0 (every camera an input), got {cfg.empty_cameras}"
            )
        if cfg.n_obs_steps != 1:
            raise ExportError(
                f"{where}: field 'n_obs_steps': expected 1 (SmolVLA looks at one observation), got {cfg.n_obs_steps}"
            )
        width, height = cfg.resize_imgs_with_padding or next(
            (f.shape[2], f.shape[1]) for f in self.checkpoint.inputs if f.type == "VISUAL"
        )
        embeddings = self._vision_embeddings()
        self.position_ids = _full_mask_position_ids(embeddings, 1, height, width)
        # the constant ids must give SmolVLM's own embeddings: checked here, on random pixels
        pixels = torch.randn(1, 3, height, width, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            want = embeddings(
                pixel_values=pixels, patch_attention_mask=torch.ones(1, *self._patches(height, width), dtype=torch.bool)
            )
            with _static_vision_positions(embeddings, self.position_ids):
                got = embeddings(pixel_values=pixels)
        from lerobot.policies.smolvla import modeling_smolvla, smolvlm_with_expert

        _check_rope(smolvlm_with_expert.apply_rope)
        self._prepare_resize()
        _check_masks(modeling_smolvla.make_att_2d_masks)
        if not torch.equal(got, want):
            raise ExportError(
                "SmolVLA: the vision embeddings with constant position ids differ from SmolVLM's own "
                f"(max difference {float((got - want).abs().max()):.3g}); this transformers release computes them "
                "another way"
            )

    def _prepare_resize(self) -> None:
        """Record the cameras' resizes (their matrices) through the policy's own ``prepare_images``, and check
        the matrix form against F.interpolate."""
        if self.policy.config.resize_imgs_with_padding is None:
            return
        gen = torch.Generator().manual_seed(0)
        cameras = [f for f in self.checkpoint.inputs if f.type == "VISUAL"]
        batch = {f.name: torch.rand(1, *f.shape, generator=gen) for f in cameras}
        with torch.no_grad():
            want, _ = self.policy.prepare_images(batch)
            with mock.patch.object(resize_module(), "F", self.resize):
                self.resize.recording = True
                try:
                    self.policy.prepare_images(batch)
                finally:
                    self.resize.recording = False
                got, _ = self.policy.prepare_images(batch)
        for f, g, w in zip(cameras, got, want, strict=True):
            error = float((g - w).abs().max())
            if g.shape != w.shape or not error < 2e-5:  # prepare_images scales to [-1, 1]: twice F's rounding
                raise ExportError(
                    f"SmolVLA: camera {f.name}: the resize as matrix products differs from F.interpolate by "
                    f"{error:.3g} (expected float rounding only)"
                )

    def _patches(self, height: int, width: int) -> tuple[int, int]:
        size = self._vision_embeddings().patch_size
        return height // size, width // size

    def _tokenizer_step(self) -> Any:
        from lerobot.processor import TokenizerProcessorStep

        step = next((s for s in self.loaded.preprocessor.steps if isinstance(s, TokenizerProcessorStep)), None)
        where = self.checkpoint.path / "policy_preprocessor.json"
        if step is None:
            raise ExportError(f"{where}: no tokenizer_processor step; SmolVLA's task reaches it as tokens")
        if not step.truncation or step.padding_side not in ("right", "left"):
            raise ExportError(
                f"{where}: tokenizer_processor: expected truncation true and padding_side right or left, got "
                f"truncation {step.truncation}, padding_side {step.padding_side!r}"
            )
        return step

    def _max_length(self) -> int:
        return int(self._tokenizer_step().max_length)

    def language_inputs(self) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        length = self._max_length()
        return {OBS_LANGUAGE_TOKENS: ((length,), torch.int64), OBS_LANGUAGE_MASK: ((length,), torch.bool)}

    def language(self) -> dict[str, Any]:
        from runtime.bundle.tokenizer import MAX_TASK_BYTES, tokenizer_definition

        step = self._tokenizer_step()
        return {
            "definition": tokenizer_definition(
                step.input_tokenizer, max_length=int(step.max_length), padding_side=step.padding_side
            ),
            "tokens_input": OBS_LANGUAGE_TOKENS,
            "mask_input": OBS_LANGUAGE_MASK,
            "max_length": int(step.max_length),
            "append_newline": _appends_newline(self.loaded.preprocessor.steps),
            "max_task_bytes": MAX_TASK_BYTES,
        }

    def example_language(self) -> dict[str, torch.Tensor]:
        from runtime.bundle.tokenizer import TaskTokenizer

        lang = self.language()
        tok = TaskTokenizer(
            "(export)", max_length=lang["max_length"], append_newline=lang["append_newline"], text=lang["definition"]
        )
        ids, mask = tok.encode(EXAMPLE_TASK)
        return {OBS_LANGUAGE_TOKENS: torch.from_numpy(ids), OBS_LANGUAGE_MASK: torch.from_numpy(mask)}

    def noise_inputs(self) -> dict[str, tuple[int, ...]]:
        cfg = self.policy.config
        return {NOISE_INPUT: (int(cfg.chunk_size), int(cfg.max_action_dim))}

    def prefix_inputs(self) -> dict[str, tuple[tuple[int, ...], str]]:
        if not self.rtc_enabled:
            return {}
        cfg = self.policy.config
        chunk, dim = int(cfg.chunk_size), int(self.checkpoint.action.shape[0])
        return {
            PREFIX_INPUT: ((chunk, dim), "prefix"),
            WEIGHTS_INPUT: ((chunk,), "prefix_weights"),
            GUIDANCE_INPUT: ((1,), "guidance"),
        }

    def rtc(self) -> dict[str, Any] | None:
        if not self.rtc_enabled:
            return None
        horizon, schedule, cap = self._rtc_fields()
        return {
            "prefix_input": PREFIX_INPUT,
            "weights_input": WEIGHTS_INPUT,
            "guidance_input": GUIDANCE_INPUT,
            "chunk_size": int(self.policy.config.chunk_size),
            "execution_horizon": horizon,
            "prefix_attention_schedule": schedule,
            "max_guidance_weight": cap,
        }

    def example_prefix(self) -> dict[str, torch.Tensor]:
        """A leftover of a few steps drawn around the action's statistics, weighted for a short delay."""
        if not self.rtc_enabled:
            return {}
        from runtime.bundle.rtc import prefix_weights

        chunk = int(self.policy.config.chunk_size)
        dim = int(self.checkpoint.action.shape[0])
        steps = max(1, round(EXAMPLE_LEFTOVER_FRACTION * self.default_steps()))
        gen = torch.Generator().manual_seed(1)
        leftover = torch.randn(steps, dim, generator=gen)
        s = self.loaded.unnormalizer._tensor_stats.get(self.checkpoint.action.name, {})
        if "mean" in s and "std" in s:
            leftover = leftover * s["std"].float() + s["mean"].float()
        prefix = torch.zeros(chunk, dim)
        prefix[:steps] = leftover
        horizon, schedule, cap = self._rtc_fields()
        weights = prefix_weights(min(EXAMPLE_DELAY, steps), horizon, chunk, schedule, steps)
        return {
            PREFIX_INPUT: prefix,
            WEIGHTS_INPUT: torch.from_numpy(weights),
            GUIDANCE_INPUT: torch.tensor([cap], dtype=torch.float32),
        }

    def predict(self, batch: dict[str, torch.Tensor], noise: dict[str, torch.Tensor]) -> torch.Tensor:
        assert self.position_ids is not None, "check() computes the vision position ids before tracing"
        with _traceable(self._vision_embeddings(), self.position_ids, self.resize):
            out: torch.Tensor = self.policy.predict_action_chunk(batch, noise=noise[NOISE_INPUT].unsqueeze(0))
        return out

    def predict_guided(
        self, batch: dict[str, torch.Tensor], noise: dict[str, torch.Tensor], prefix: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """LeRobot's RTC path (``predict_action_chunk`` with ``rtc_config.enabled``), every flow step through
        ``_guided_step`` with the leftover, weights and cap the program takes."""
        assert self.position_ids is not None, "check() computes the vision position ids before tracing"
        width = int(self.policy.config.max_action_dim) - int(self.checkpoint.action.shape[0])
        weights, cap = prefix[WEIGHTS_INPUT], prefix[GUIDANCE_INPUT]
        normalised: list[torch.Tensor] = []

        def leftover() -> torch.Tensor:
            # Made at its first use, in the first flow step: the program's inputs are then first read in
            # their own order (noise before the leftover), which is the order the one OpenVINO delegate
            # takes them in, and the openvino engine feeds them in.
            if not normalised:
                # in the wire's units: normalised as LeRobot's queue keeps the policy's own chunk, then
                # padded to the model's action width with zeros, as RTCProcessor pads it
                x = self.loaded.unnormalizer._normalize_action(prefix[PREFIX_INPUT].unsqueeze(0), inverse=False)
                normalised.append(torch.cat([x, torch.zeros(*x.shape[:-1], width)], dim=-1) if width > 0 else x)
            return normalised[0]

        def guided(
            x_t: torch.Tensor,
            prev_chunk_left_over: Any,
            inference_delay: Any,
            time: float,
            original_denoise_step_partial: Any,
            execution_horizon: Any = None,
        ) -> torch.Tensor:
            return _guided_step(x_t, time, original_denoise_step_partial, leftover, weights, cap)

        processor = self.policy.model.rtc_processor
        with (
            _traceable(self._vision_embeddings(), self.position_ids, self.resize),
            mock.patch.object(processor, "denoise_step", guided),
        ):
            # with RTC enabled, sample_actions hands every flow step to the processor's denoise_step, here
            # ``guided``, which holds the leftover, weights and cap itself
            out: torch.Tensor = self.policy.predict_action_chunk(batch, noise=noise[NOISE_INPUT].unsqueeze(0))
        return out


FAMILY = SmolvlaFamily
