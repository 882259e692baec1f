"""What each LeRobot family adds to the generic graph, on stand-in policies (a config of plain values, no
model): the refusals word for word, the steps served, the noise inputs' shapes and the order the draws
are read in; TD-MPC's gather; importing LeRobot and what to install. The predictions themselves run
LeRobot's own model code: tests/engine/test_lerobot_{diffusion,tdmpc,vqbet}.py, against LeRobot."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

import runtime.export.lerobot.torchvision_shim as shim
from runtime.errors import ExportError, MissingDependencyError
from runtime.export.lerobot.checkpoint import Checkpoint, Feature
from runtime.export.lerobot.diffusion import DiffusionFamily, check_scheduler, timesteps
from runtime.export.lerobot.draws import Draws
from runtime.export.lerobot.tdmpc import TdmpcFamily, _gather_along_dim, _gathers
from runtime.export.lerobot.vqbet import VqbetFamily


def _loaded(policy: Any, chunk: int = 8, steps: int = 4, n_obs: int = 1, dim: int = 2) -> Any:
    ckpt = Checkpoint(Path("/ck"), "x", (), Feature("action", "ACTION", (dim,)), chunk, steps, n_obs, {})
    return SimpleNamespace(checkpoint=ckpt, policy=policy)


def _taken(draws: Draws, kind: str, shapes: list[tuple[int, ...]]) -> list[torch.Tensor]:
    return [draws.take(kind, s) for s in shapes]


# --- Diffusion Policy ---


class DDIMScheduler:
    def __init__(self) -> None:
        self.asked: list[int] = []
        self.timesteps = torch.tensor([])

    def set_timesteps(self, n: int) -> None:
        self.asked.append(n)
        self.timesteps = torch.tensor([900, 600, 300, 0][:n])


class DDPMScheduler(DDIMScheduler):
    pass


def _diffusion(scheduler: Any, steps: int = 3) -> Any:
    return SimpleNamespace(diffusion=SimpleNamespace(noise_scheduler=scheduler, num_inference_steps=steps))


def test_a_ddpm_diffusion_policy_is_refused_naming_the_way_out() -> None:
    with pytest.raises(ExportError) as e:
        check_scheduler(_diffusion(DDPMScheduler()))
    assert str(e.value) == (
        "Diffusion Policy with the DDPMScheduler: its step draws fresh noise inside the graph, which a program "
        "cannot hold; export a policy configured with noise_scheduler_type='DDIM' (LeRobot can switch a trained "
        "DDPM model to DDIM sampling by editing config.json)"
    )
    check_scheduler(_diffusion(DDIMScheduler()))


def test_the_sampling_timesteps_are_python_ints_of_the_configured_count() -> None:
    scheduler = DDIMScheduler()
    got = timesteps(_diffusion(scheduler, steps=3))
    assert got == [900, 600, 300]
    assert all(type(t) is int for t in got)
    assert scheduler.asked == [3]
    with pytest.raises(ExportError):
        timesteps(_diffusion(DDPMScheduler()))


def test_diffusion_serves_from_its_last_observation_step_with_one_noise_input() -> None:
    scheduler = DDIMScheduler()
    family = DiffusionFamily(_loaded(_diffusion(scheduler, steps=2), chunk=16, steps=8, n_obs=2, dim=6))
    assert family.timesteps == []
    family.check()
    assert family.timesteps == [900, 600]
    assert (family.first_step(), family.usable_steps(), family.default_steps()) == (1, 15, 8)
    assert family.noise_inputs() == {"noise": (16, 6)}
    with pytest.raises(ExportError, match=r"^Diffusion Policy with the DDPMScheduler"):
        DiffusionFamily(_loaded(_diffusion(DDPMScheduler()))).check()


# --- TD-MPC ---


@pytest.mark.parametrize(
    ("x_shape", "i_shape", "dim"),
    [
        ((4, 5), (4, 2), 1),
        ((4, 5), (3, 5), 0),
        ((4, 5, 3), (4, 2, 1), -2),
        ((2, 5, 3), (1, 5, 1), 2),
        ((1, 5), (3, 2), 1),  # the indices broadcast the source
        ((1, 5, 3), (4, 2, 3), 1),
        ((6,), (3,), None),
    ],
)
def test_the_planners_gather_takes_along_a_dimension_as_torch_does(
    x_shape: tuple[int, ...], i_shape: tuple[int, ...], dim: int | None
) -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*x_shape, generator=g)
    size = x.numel() if dim is None else x.shape[dim]
    indices = torch.randint(0, size, i_shape, generator=g)
    expected = torch.take_along_dim(x, indices) if dim is None else torch.take_along_dim(x, indices, dim)
    assert torch.equal(_gather_along_dim(x, indices, dim), expected)


def test_the_gather_stands_in_for_take_along_dim_only_inside_the_block() -> None:
    x = torch.tensor([[1.0, 2.0, 3.0]])
    real = torch.Tensor.take_along_dim
    with _gathers():
        assert torch.Tensor.take_along_dim is not real
        assert x.take_along_dim(torch.tensor([[2, 0]]), dim=1).tolist() == [[3.0, 1.0]]
        assert x.take_along_dim(torch.tensor([1])).tolist() == [2.0]
    assert torch.Tensor.take_along_dim is real


def _tdmpc_config(**changes: Any) -> Any:
    values = {
        "n_obs_steps": 1,
        "image_features": {"observation.image": None},
        "horizon": 3,
        "use_mpc": True,
        "n_action_repeats": 1,
        "n_action_steps": 2,
        "cem_iterations": 2,
        "n_pi_samples": 4,
        "n_gaussian_samples": 5,
        "min_std": 0.05,
        "q_ensemble_size": 5,
    }
    values.update(changes)
    return SimpleNamespace(**values)


def _tdmpc(**changes: Any) -> TdmpcFamily:
    return TdmpcFamily(_loaded(SimpleNamespace(config=_tdmpc_config(**changes)), chunk=3, steps=2, dim=6))


def test_tdmpc_refuses_a_history_and_a_second_camera() -> None:
    with pytest.raises(ExportError) as e:
        _tdmpc(n_obs_steps=2).check()
    assert str(e.value) == (
        "/ck/config.json: field 'n_obs_steps': expected 1 (LeRobot's TD-MPC plans from one observation), got 2"
    )
    with pytest.raises(ExportError) as e:
        _tdmpc(image_features={"a": None, "b": None}).check()
    assert str(e.value) == (
        "/ck/config.json: field 'input_features': expected at most one VISUAL feature (LeRobot's TD-MPC encodes "
        "one camera), got ['a', 'b']"
    )
    _tdmpc().check()
    _tdmpc(image_features={}).check()


def test_tdmpc_serves_its_plan_its_first_action_or_that_action_repeated() -> None:
    assert (_tdmpc().usable_steps(), _tdmpc().default_steps()) == (3, 2)
    no_mpc = _tdmpc(use_mpc=False)
    assert (no_mpc.usable_steps(), no_mpc.default_steps()) == (1, 2)
    repeats = _tdmpc(n_action_repeats=4)
    assert (repeats.usable_steps(), repeats.default_steps()) == (4, 4)
    twice = _tdmpc(n_action_repeats=2, n_action_steps=1)
    assert (twice.usable_steps(), twice.default_steps()) == (2, 2)
    assert (_tdmpc(n_action_repeats=1, use_mpc=False).usable_steps()) == 1


def test_tdmpc_noise_inputs_follow_the_planners_draws() -> None:
    assert _tdmpc().noise_inputs() == {
        "noise.pi": (3, 4, 6),
        "noise.cem": (2, 3, 5, 6),
        "noise.terminal": (2, 9, 6),
        "noise.ensemble": (2, 2),
        "noise.elite": (1,),
    }
    assert list(_tdmpc().noise_inputs()) == ["noise.pi", "noise.cem", "noise.terminal", "noise.ensemble", "noise.elite"]
    assert _tdmpc(use_mpc=False).noise_inputs() == {}
    assert _tdmpc(n_pi_samples=1).noise_inputs()["noise.pi"] == (3, 1, 6)
    assert _tdmpc(q_ensemble_size=3).noise_inputs()["noise.ensemble"] == (2, 2)  # two of three Q functions
    assert _tdmpc(n_pi_samples=0, q_ensemble_size=2).noise_inputs() == {
        "noise.cem": (2, 3, 5, 6),
        "noise.terminal": (2, 5, 6),
        "noise.elite": (1,),
    }
    assert _tdmpc(min_std=0).noise_inputs() == {
        "noise.cem": (2, 3, 5, 6),
        "noise.ensemble": (2, 2),
        "noise.elite": (1,),
    }


def test_tdmpc_draws_are_read_in_the_planners_order() -> None:
    family = _tdmpc()
    noise = {name: torch.randn(*shape) for name, shape in family.noise_inputs().items()}
    draws = family._draws(noise)
    assert draws.where == "TD-MPC policy /ck"
    assert draws.index_copies == 2
    # the policy prior's samples per horizon step, then each CEM iteration's Gaussian and terminal samples
    got = _taken(draws, "randn", [(4, 1, 6)] * 3 + [(3, 5, 1, 6), (9, 1, 6)] * 2)
    expected = [noise["noise.pi"][t].unsqueeze(1) for t in range(3)]
    for i in range(2):
        expected += [noise["noise.cem"][i].unsqueeze(2), noise["noise.terminal"][i].unsqueeze(1)]
    assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))
    ensemble = _taken(draws, "randint", [(2,), (2,)])
    assert [e.tolist() for e in ensemble] == [noise["noise.ensemble"][i].tolist() for i in range(2)]
    assert draws.take("multinomial", (1,)) is noise["noise.elite"]
    draws.check_all_taken()


def test_tdmpc_draws_without_the_optional_noise() -> None:
    family = _tdmpc(n_pi_samples=0, q_ensemble_size=2, min_std=0)
    noise = {name: torch.randn(*shape) for name, shape in family.noise_inputs().items()}
    draws = family._draws(noise)
    got = _taken(draws, "randn", [(3, 5, 1, 6)] * 2)
    assert [g.tolist() for g in got] == [noise["noise.cem"][i].unsqueeze(2).tolist() for i in range(2)]
    draws.take("multinomial", (1,))
    draws.check_all_taken()
    with pytest.raises(ExportError, match="one more randint draw than the 0"):
        draws.take("randint", (2,))


# --- VQ-BeT ---


def _vqbet(sequential: bool) -> VqbetFamily:
    config = SimpleNamespace(n_obs_steps=3, n_action_pred_token=4, sequentially_select=sequential)
    head = SimpleNamespace(vqvae_model=SimpleNamespace(vqvae_num_layers=2))
    policy = SimpleNamespace(config=config, vqbet=SimpleNamespace(action_head=head))
    return VqbetFamily(_loaded(policy))


def test_vqbet_draws_one_code_per_query_token_and_layer() -> None:
    assert _vqbet(False).noise_inputs() == {"noise.codes": (6, 2)}
    noise = torch.arange(12.0).reshape(6, 2)
    draws = _vqbet(False)._draws(noise)
    assert draws.where == "VQ-BeT policy /ck"
    assert draws.take("multinomial", (12,)).tolist() == list(range(12))  # rows (token, layer)
    draws.check_all_taken()


def test_vqbet_selecting_sequentially_draws_the_primary_codes_first() -> None:
    noise = torch.arange(12.0).reshape(6, 2)
    draws = _vqbet(True)._draws(noise)
    assert draws.where == "VQ-BeT policy /ck"
    assert [d.tolist() for d in _taken(draws, "multinomial", [(6,), (6,)])] == [
        [0, 2, 4, 6, 8, 10],
        [1, 3, 5, 7, 9, 11],
    ]
    draws.check_all_taken()


# --- importing LeRobot ---


def test_lerobot_available_says_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    imported: list[str] = []
    monkeypatch.setattr(shim, "import_lerobot", lambda: imported.append("lerobot"))
    for missing in ("", "not installed"):
        monkeypatch.setattr(shim, "package_version", lambda name, v=missing: v)
        assert shim.lerobot_available() == f"LeRobot is not installed ({shim.INSTALL_HINT})"
    monkeypatch.setattr(shim, "package_version", lambda name: "0.3.3")
    assert shim.lerobot_available() == "LeRobot 0.3.3 is installed; this exporter reads 0.4.x"
    assert imported == []
    monkeypatch.setattr(shim, "package_version", lambda name: "0.4.4" if name == "lerobot" else "?")
    assert shim.lerobot_available() is None
    assert imported == ["lerobot"]

    def broken() -> None:
        raise MissingDependencyError("no torchvision")

    monkeypatch.setattr(shim, "import_lerobot", broken)
    assert shim.lerobot_available() == "no torchvision"


def test_the_install_hint_and_supported_releases() -> None:
    assert shim.SUPPORTED_LEROBOT == ("0.4",)
    assert shim.INSTALL_HINT == (
        "pip install --no-deps lerobot==0.4.4 && pip install 'lerobot-runtime[lerobot]' (LeRobot pins an older "
        "torch than ExecuTorch needs, so it goes in without its dependencies)"
    )


def test_importing_lerobot_shims_first_and_names_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(shim, "_shim_torchvision", lambda: calls.append("torchvision"))
    monkeypatch.setattr(shim, "_shim_transformers", lambda: calls.append("transformers"))
    monkeypatch.delenv("TORCHAO_NO_WARNINGS", raising=False)
    real = importlib.import_module

    def import_module(name: str) -> Any:
        calls.append(name)
        return real("json") if name == "lerobot" else real(name)

    monkeypatch.setattr(importlib, "import_module", import_module)
    assert shim.import_lerobot() is sys.modules["json"]
    assert calls == ["torchvision", "transformers", "lerobot"]
    import os

    assert os.environ["TORCHAO_NO_WARNINGS"] == "1"
    monkeypatch.setenv("TORCHAO_NO_WARNINGS", "0")
    shim.import_lerobot()
    assert os.environ["TORCHAO_NO_WARNINGS"] == "0"  # a user's setting is kept

    def missing(name: str) -> Any:
        raise ModuleNotFoundError("No module named 'lerobot'")

    monkeypatch.setattr(importlib, "import_module", missing)
    with pytest.raises(MissingDependencyError) as e:
        shim.import_lerobot()
    assert (
        str(e.value) == f"exporting a LeRobot checkpoint needs LeRobot (No module named 'lerobot'): {shim.INSTALL_HINT}"
    )


def test_transformers_version_check_is_stubbed_only_before_transformers_is_imported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name = "transformers.dependency_versions_check"
    monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.delitem(sys.modules, "transformers", raising=False)
    spec = SimpleNamespace(origin="/site/transformers/__init__.py")
    monkeypatch.setattr(importlib.util, "find_spec", lambda n: spec if n == "transformers" else None)
    shim._shim_transformers()
    stub = sys.modules[name]
    assert stub.dep_version_check("tokenizers") is None  # type: ignore[attr-defined]
    assert stub.dep_version_check("huggingface-hub", "hint") is None  # type: ignore[attr-defined]
    assert stub.__doc__ == (
        "transformers' import-time version check, skipped by runtime.export.lerobot.torchvision_shim"
    )
    # already stubbed, transformers already imported, or not installed: nothing changes
    shim._shim_transformers()
    assert sys.modules[name] is stub
    monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "transformers", SimpleNamespace())
    shim._shim_transformers()
    assert name not in sys.modules
    monkeypatch.delitem(sys.modules, "transformers")
    monkeypatch.setattr(importlib.util, "find_spec", lambda n: None)
    shim._shim_transformers()
    assert name not in sys.modules


def test_torchvisions_extension_is_loaded_or_its_two_schemas_defined(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "torchvision", raising=False)
    spec = SimpleNamespace(origin="/site/torchvision/__init__.py")
    monkeypatch.setattr(importlib.util, "find_spec", lambda n: spec if n == "torchvision" else None)
    loaded: list[str] = []
    monkeypatch.setattr(torch.ops, "load_library", lambda path: loaded.append(path))
    shim._shim_torchvision()
    assert loaded == ["/site/torchvision/_C.so"]

    defined: list[tuple[str, ...]] = []

    class Library:
        def __init__(self, ns: str, kind: str) -> None:
            defined.append((ns, kind))

        def define(self, schema: str) -> None:
            defined.append((schema,))

    def fails(path: str) -> None:
        raise OSError("undefined symbol")

    monkeypatch.setattr(torch.ops, "load_library", fails)
    monkeypatch.setattr(torch.library, "Library", Library)
    monkeypatch.setattr(shim, "_TORCHVISION_SHIM", None)
    shim._shim_torchvision()
    assert defined == [
        ("torchvision", "FRAGMENT"),
        ("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",),
        ("qnms(Tensor qdets, Tensor scores, float iou_threshold) -> Tensor",),
    ]
    assert isinstance(shim._TORCHVISION_SHIM, Library)
    shim._shim_torchvision()  # defined once per process
    assert len(defined) == 3

    def runtime_error(path: str) -> None:
        raise RuntimeError("could not load")

    monkeypatch.setattr(torch.ops, "load_library", runtime_error)
    shim._shim_torchvision()  # a RuntimeError is the same as an OSError
    assert len(defined) == 3


def test_torchvision_is_left_alone_when_absent_imported_or_without_a_file(monkeypatch: pytest.MonkeyPatch) -> None:
    loaded: list[str] = []
    monkeypatch.setattr(torch.ops, "load_library", lambda path: loaded.append(path))
    monkeypatch.delitem(sys.modules, "torchvision", raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda n: None)
    shim._shim_torchvision()
    monkeypatch.setattr(importlib.util, "find_spec", lambda n: SimpleNamespace(origin=None))
    shim._shim_torchvision()
    monkeypatch.setattr(importlib.util, "find_spec", lambda n: SimpleNamespace(origin="/site/torchvision/__init__.py"))
    monkeypatch.setitem(sys.modules, "torchvision", SimpleNamespace())
    shim._shim_torchvision()
    assert loaded == []


# --- SmolVLA: real-time chunking's fields and the checks before tracing (a sample of the module) ---


def _smolvla(rtc: Any = None, **config: Any) -> Any:
    from runtime.export.lerobot.smolvla import SmolvlaFamily

    values = {
        "rtc_config": rtc,
        "chunk_size": 10,
        "max_action_dim": 32,
        "n_action_steps": 5,
        "adapt_to_pi_aloha": False,
        "empty_cameras": 0,
        "n_obs_steps": 1,
    }
    values.update(config)
    steps = int(values["n_action_steps"])
    loaded = _loaded(SimpleNamespace(config=SimpleNamespace(**values)), chunk=10, steps=steps, dim=6)
    loaded.unnormalizer = SimpleNamespace(_tensor_stats={})
    return SmolvlaFamily(loaded)


def _rtc(**changes: Any) -> Any:
    values = {
        "enabled": True,
        "execution_horizon": 4,
        "prefix_attention_schedule": SimpleNamespace(value="LINEAR"),
        "max_guidance_weight": 5.0,
    }
    values.update(changes)
    return SimpleNamespace(**values)


def test_smolvla_without_rtc_takes_one_noise_input_and_no_prefix() -> None:
    for family in (_smolvla(), _smolvla(_rtc(enabled=False))):
        assert family.rtc_enabled is False
        assert family.noise_inputs() == {"noise": (10, 32)}
        assert (family.prefix_inputs(), family.rtc(), family.example_prefix()) == ({}, None, {})


def test_smolvla_with_rtc_takes_the_leftover_its_weights_and_the_cap() -> None:
    family = _smolvla(_rtc())
    assert family.rtc_enabled is True
    assert family.prefix_inputs() == {
        "rtc.prefix": ((10, 6), "prefix"),
        "rtc.prefix_weights": ((10,), "prefix_weights"),
        "rtc.max_guidance_weight": ((1,), "guidance"),
    }
    assert family.rtc() == {
        "prefix_input": "rtc.prefix",
        "weights_input": "rtc.prefix_weights",
        "guidance_input": "rtc.max_guidance_weight",
        "chunk_size": 10,
        "execution_horizon": 4,
        "prefix_attention_schedule": "LINEAR",
        "max_guidance_weight": 5.0,
    }
    plain = _smolvla(_rtc(prefix_attention_schedule="EXP", execution_horizon=3.0, max_guidance_weight=2))
    assert plain._rtc_fields() == (3, "EXP", 2.0)
    assert [type(v) for v in plain._rtc_fields()] == [int, str, float]


def test_the_example_prefix_is_a_leftover_around_the_action_statistics_weighted_for_a_short_delay() -> None:
    family = _smolvla(_rtc())
    family.loaded.unnormalizer._tensor_stats = {
        "action": {"mean": torch.full((6,), 10.0), "std": torch.full((6,), 2.0)}
    }
    got = family.example_prefix()
    assert list(got) == ["rtc.prefix", "rtc.prefix_weights", "rtc.max_guidance_weight"]
    # 0.6 of the 5 steps served: a leftover of 3 steps, seed 1, the rest of the chunk zero
    leftover = torch.randn(3, 6, generator=torch.Generator().manual_seed(1)) * 2 + 10
    assert torch.allclose(got["rtc.prefix"][:3], leftover)
    assert got["rtc.prefix"][3:].abs().sum().item() == 0
    # a delay of 2 steps frozen, then LINEAR decay up to the horizon of 4 capped at the leftover's 3 steps
    assert got["rtc.prefix_weights"].tolist() == [1, 1, 0.5, 0, 0, 0, 0, 0, 0, 0]
    assert got["rtc.max_guidance_weight"].dtype == torch.float32
    assert got["rtc.max_guidance_weight"].tolist() == [5.0]
    family.loaded.unnormalizer._tensor_stats = {"action": {"mean": torch.full((6,), 10.0)}}  # no std: as drawn
    raw = torch.randn(3, 6, generator=torch.Generator().manual_seed(1))
    assert torch.equal(family.example_prefix()["rtc.prefix"][:3], raw)
    family.loaded.unnormalizer._tensor_stats = {}  # no statistics for the action at all: as drawn too
    assert torch.equal(family.example_prefix()["rtc.prefix"][:3], raw)


def test_a_policy_serving_one_step_gets_an_example_leftover_of_one_step() -> None:
    family = _smolvla(_rtc(), n_action_steps=1)
    got = family.example_prefix()
    assert got["rtc.prefix"][1:].abs().sum().item() == 0 and got["rtc.prefix"][0].abs().sum().item() > 0
    assert got["rtc.prefix_weights"].tolist() == [1] + [0] * 9


def test_smolvlas_rtc_settings_are_refused_before_tracing_naming_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    import runtime.export.lerobot.smolvla as smolvla

    checked: list[Any] = []
    monkeypatch.setattr(smolvla, "_check_guidance", checked.append)
    where = "/ck/config.json"
    for rtc, message in (
        (_rtc(execution_horizon=0), f"{where}: field 'rtc_config.execution_horizon': expected >= 1 step, got 0"),
        (
            _rtc(prefix_attention_schedule="CUBIC"),
            f"{where}: field 'rtc_config.prefix_attention_schedule': expected one of ZEROS, ONES, LINEAR, EXP, "
            "got 'CUBIC'",
        ),
        (_rtc(max_guidance_weight=0.0), f"{where}: field 'rtc_config.max_guidance_weight': expected > 0, got 0.0"),
        (_rtc(max_guidance_weight=-1), f"{where}: field 'rtc_config.max_guidance_weight': expected > 0, got -1.0"),
        (
            _rtc(max_guidance_weight=float("inf")),
            f"{where}: field 'rtc_config.max_guidance_weight': expected > 0, got inf",
        ),
    ):
        with pytest.raises(ExportError) as e:
            _smolvla(rtc)._check_rtc()
        assert str(e.value) == message
    assert checked == []
    good = _rtc(execution_horizon=1)
    _smolvla(good)._check_rtc()
    small = _rtc(max_guidance_weight=0.5)  # a cap below 1 is a cap
    _smolvla(small)._check_rtc()
    assert checked == [good, small]


def test_smolvlas_settings_a_program_cannot_hold_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import runtime.export.lerobot.smolvla as smolvla

    where = "/ck/config.json"
    for config, message in (
        (
            {"adapt_to_pi_aloha": True},
            f"{where}: field 'adapt_to_pi_aloha': expected false (Aloha's conversions), got true",
        ),
        ({"empty_cameras": 2}, f"{where}: field 'empty_cameras': expected 0 (every camera an input), got 2"),
        ({"n_obs_steps": 2}, f"{where}: field 'n_obs_steps': expected 1 (SmolVLA looks at one observation), got 2"),
    ):
        with pytest.raises(ExportError) as e:
            _smolvla(**config).check()
        assert str(e.value) == message
    # the RTC settings are checked first
    monkeypatch.setattr(smolvla, "_check_guidance", lambda rtc: None)
    with pytest.raises(ExportError, match=r"rtc_config\.execution_horizon"):
        _smolvla(_rtc(execution_horizon=0), adapt_to_pi_aloha=True).check()


def test_the_guidance_weight_is_lerobots_capped() -> None:
    from runtime.export.lerobot.smolvla import _guidance_weight

    cap = torch.tensor([5.0])
    assert _guidance_weight(1.0, cap) is cap  # tau 0: the cap itself
    # tau 0.5: (1 - tau) / tau * ((1 - tau)^2 + tau^2) / (1 - tau)^2 = 1 * 0.5 / 0.25 = 2
    assert _guidance_weight(0.5, cap).tolist() == [2.0]
    assert _guidance_weight(0.5, torch.tensor([1.5])).tolist() == [1.5]
    # tau 0.25: 3 * (0.5625 + 0.0625) / 0.5625 = 10 / 3
    assert _guidance_weight(0.75, cap).tolist() == pytest.approx([10 / 3])
    # tau 0.75: 1/3 * (0.0625 + 0.5625) / 0.0625 = 10 / 3 as well
    assert _guidance_weight(0.25, cap).tolist() == pytest.approx([10 / 3])
    assert _guidance_weight(0.9, cap).tolist() == [5.0]  # tau 0.1: 9 * 0.82 / 0.81, past the cap
