"""SmolVLA checkpoints with random weights and a VLM directory written in code, for tests and benchmarks.

SmolVLA builds its VLM from ``vlm_model_name`` with ``AutoConfig``/``AutoProcessor.from_pretrained``;
here that name is a local directory this module writes: a SmolVLM config (``tiny``: a vision encoder
and text model a few dozen wide; ``default``: SmolVLM2-500M-Video-Instruct's shapes), a processor and
a byte-level BPE tokenizer trained here with ``tokenizers`` on a small corpus, with SmolVLM's special
tokens. No download is involved, and nothing here has been trained: the weights are random, the
tokenizer knows a few hundred tokens. Needs LeRobot and transformers (the ``smolvla`` extra).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final, Literal

from runtime.policies.lerobot_checkpoints import Weights

Size = Literal["tiny", "default"]

# SmolVLM's own special tokens (its tokenizer_config.json names them the same way)
SPECIAL_TOKENS: Final = {
    "eos_token": "<|endoftext|>",
    "pad_token": "<|endoftext|>",
    "bos_token": "<|im_start|>",
    "unk_token": "<|endoftext|>",
}
EXTRA_SPECIAL_TOKENS: Final = {
    "fake_image_token": "<fake_token_around_image>",
    "image_token": "<image>",
    "global_image_token": "<global-img>",
    "end_of_utterance_token": "<end_of_utterance>",
}

# What the tokenizer is trained on: task strings of the kind SO-101 datasets carry, plus the
# alphabet, so every byte-level merge a test string needs exists somewhere.
CORPUS: Final = (
    "Pick up the red cube and place it in the box.",
    "Grasp the lego brick and put it on the plate.",
    "Move the cup to the left of the bowl.",
    "Open the drawer, then close it again.",
    "Stack the blue block on top of the green block.",
    "Push the sponge towards the sink.",
    "Fold the cloth in half.",
    "Put the pen in the mug.",
    "Pour the beans into the pan.",
    "Ramasse le cube rouge et pose-le dans la boîte.",
    "Nimm den Würfel und leg ihn in die Schachtel.",
    "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789 .,;:!?-'\"()",
)

# SmolVLM2-500M-Video-Instruct's config shapes (SmolVLA's default VLM): SigLIP-style 512x512 encoder
# with 16x16 patches, pixel shuffle by 4 (64 tokens per image), a SmolLM2 text model 960 wide.
VLM_SHAPES: Final[dict[str, dict[str, Any]]] = {
    "tiny": {
        "scale_factor": 2,
        "vision": {
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "image_size": 64,
            "patch_size": 16,
        },
        "text": {
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 4,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "max_position_embeddings": 512,
            "rope_theta": 100000.0,
            "rms_norm_eps": 1e-5,
        },
    },
    "default": {
        "scale_factor": 4,
        # SmolVLM2's vocabulary; the tokenizer trained here knows a few hundred of them (the rest of the
        # embedding table is never looked up, but has the size the real one has)
        "vocab_size": 49280,
        "vision": {
            "hidden_size": 768,
            "intermediate_size": 3072,
            "num_hidden_layers": 12,
            "num_attention_heads": 12,
            "image_size": 512,
            "patch_size": 16,
        },
        "text": {
            "hidden_size": 960,
            "intermediate_size": 2560,
            "num_hidden_layers": 32,
            "num_attention_heads": 15,
            "num_key_value_heads": 5,
            "head_dim": 64,
            "max_position_embeddings": 8192,
            "rope_theta": 100000.0,
            "rms_norm_eps": 1e-5,
        },
    },
}

# SmolVLA's own config for each size (LeRobot's defaults for "default": 16 VLM layers, chunk 50,
# 10 flow steps, 48 language tokens, 512x512 images)
POLICY_SHAPES: Final[dict[str, dict[str, Any]]] = {
    "tiny": {
        "chunk_size": 10,
        "n_action_steps": 5,
        "num_steps": 3,  # each flow step is a copy of the action expert's ops in the program
        "tokenizer_max_length": 16,
        "resize_imgs_with_padding": (64, 64),
        "num_vlm_layers": 4,
    },
    "default": {},
}


def train_tokenizer(vocab_size: int = 400) -> Any:
    """A byte-level BPE tokenizer (SmolLM2's kind) with NFC normalisation and SmolVLM's special tokens."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    specials = list(dict.fromkeys([*SPECIAL_TOKENS.values(), *EXTRA_SPECIAL_TOKENS.values()]))
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(CORPUS) * 4, trainer=trainer)
    return tok


def write_vlm(out: str | Path, size: Size = "tiny") -> Path:
    """A SmolVLM model directory (config, processor, tokenizer) that ``from_pretrained`` reads offline."""
    from runtime.export.lerobot import import_lerobot

    import_lerobot()  # transformers' import goes through the shims there
    from transformers import PreTrainedTokenizerFast, SmolVLMConfig
    from transformers.models.smolvlm import (  # type: ignore[attr-defined]  # lazily exported
        SmolVLMImageProcessor,
        SmolVLMProcessor,
        SmolVLMVideoProcessor,
    )

    shapes = VLM_SHAPES[size]
    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=train_tokenizer(),
        model_max_length=8192,
        extra_special_tokens=dict(EXTRA_SPECIAL_TOKENS),
        **SPECIAL_TOKENS,
    )
    vocab = max(len(tokenizer), int(shapes.get("vocab_size", 0)))
    config = SmolVLMConfig(  # type: ignore[no-untyped-call]
        vision_config={**shapes["vision"], "model_type": "smolvlm_vision"},
        text_config={**shapes["text"], "vocab_size": vocab, "model_type": "llama"},
        scale_factor=shapes["scale_factor"],
        image_token_id=tokenizer.convert_tokens_to_ids(EXTRA_SPECIAL_TOKENS["image_token"]),
        pad_token_id=tokenizer.pad_token_id,
        vocab_size=vocab,
    )
    config.save_pretrained(path)
    edge = shapes["vision"]["image_size"]
    image_processor = SmolVLMImageProcessor(
        size={"longest_edge": edge}, max_image_size={"longest_edge": edge}, do_image_splitting=False
    )
    video_processor = SmolVLMVideoProcessor(size={"longest_edge": edge}, max_image_size={"longest_edge": edge})
    tokens_per_image = (edge // shapes["vision"]["patch_size"] // shapes["scale_factor"]) ** 2
    processor = SmolVLMProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        image_seq_len=tokens_per_image,
    )
    processor.save_pretrained(path)
    return path


def write_smolvla(
    out: str | Path,
    size: Size = "tiny",
    *,
    vlm_dir: str | Path | None = None,
    image_hw: tuple[int, int] | dict[str, tuple[int, int]] | None = None,
    cameras: tuple[str, ...] = ("front",),
    seed: int = 0,
    rtc: dict[str, Any] | None = None,
    dataset_stats: dict[str, dict[str, Any]] | None = None,
    weights: Weights = "trained",
    **overrides: Any,
) -> Path:
    """A SmolVLA checkpoint (LeRobot's classes, random weights) whose ``vlm_model_name`` is a local VLM
    directory (written beside it as ``<out>.vlm`` unless ``vlm_dir`` names one). ``image_hw``: every
    camera's (height, width), or each camera's by name. ``rtc``: real-time
    chunking enabled in its config (``rtc_config``), with these RTCConfig fields. ``dataset_stats``:
    normalisation statistics (feature -> tensors) in place of the seeded random ones. ``weights``:
    ``trained`` scale (runtime.policies.lerobot_checkpoints.scale_like_trained) or the modules' ``init``."""
    from runtime.export.lerobot import import_lerobot

    import_lerobot()
    import torch
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.factory import make_pre_post_processors
    from lerobot.policies.rtc.configuration_rtc import RTCConfig
    from lerobot.policies.smolvla.configuration_smolvla import SmolVLAConfig
    from lerobot.policies.smolvla.modeling_smolvla import SmolVLAPolicy

    from runtime.policies.lerobot_checkpoints import _stats, scale_like_trained

    path = Path(out)
    vlm = Path(vlm_dir) if vlm_dir is not None else write_vlm(path.parent / f"{path.name}.vlm", size)
    names = tuple(f"observation.images.{c}" for c in cameras)
    default_hw = (96, 128) if size == "tiny" else (480, 640)
    sizes = image_hw if isinstance(image_hw, dict) else dict.fromkeys(cameras, image_hw or default_hw)
    inputs = {
        **{f"observation.images.{c}": PolicyFeature(FeatureType.VISUAL, (3, *sizes[c])) for c in cameras},
        "observation.state": PolicyFeature(FeatureType.STATE, (6,)),
    }
    outputs = {"action": PolicyFeature(FeatureType.ACTION, (6,))}
    if rtc is not None:
        from lerobot.configs.types import RTCAttentionSchedule

        fields = dict(rtc)
        if "prefix_attention_schedule" in fields:
            fields["prefix_attention_schedule"] = RTCAttentionSchedule(fields["prefix_attention_schedule"])
        overrides["rtc_config"] = RTCConfig(enabled=True, **fields)
    torch.manual_seed(seed)
    cfg = SmolVLAConfig(
        input_features=inputs,
        output_features=outputs,
        vlm_model_name=str(vlm.resolve()),
        load_vlm_weights=False,  # the VLM's weights are the checkpoint's own (random here)
        device="cpu",
        **{**POLICY_SHAPES[size], **overrides},
    )
    policy = SmolVLAPolicy(cfg)
    if weights == "trained":
        scale_like_trained(policy, seed)
    stats = _stats(torch, names, 6, seed)
    stats.update(dataset_stats or {})
    pre, post = make_pre_post_processors(cfg, dataset_stats=stats)
    policy.save_pretrained(path)
    pre.save_pretrained(path)
    post.save_pretrained(path)
    return path


if __name__ == "__main__":
    # python -m runtime.policies.smolvla_checkpoint OUT_DIR [tiny|default] [front,wrist] [rtc]
    # (run by the Python of the LeRobot release that is to write it; the VLM directory is OUT_DIR.vlm;
    # rtc: real-time chunking enabled, horizon 6 and guidance cap 8)
    import sys

    args = sys.argv[1:]
    if not args:
        raise SystemExit(
            "usage: python -m runtime.policies.smolvla_checkpoint OUT_DIR [tiny|default] [front,wrist] [rtc]"
        )
    cams = tuple(args[2].split(",")) if len(args) > 2 else ("front",)
    with_rtc = {"execution_horizon": 6, "max_guidance_weight": 8.0} if args[3:4] == ["rtc"] else None
    size = args[1] if len(args) > 1 else "tiny"
    print(write_smolvla(args[0], size, cameras=cams, rtc=with_rtc))  # type: ignore[arg-type]
