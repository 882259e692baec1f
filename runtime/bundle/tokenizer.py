"""A language policy's task string to the program's token inputs, on the robot, without torch.

LeRobot's preprocessor for SmolVLA turns the ``task`` string into ``observation.language.tokens``
and ``observation.language.attention_mask``: ``SmolVLANewLineProcessor`` appends a newline when the
task has none, then ``TokenizerProcessorStep`` calls the VLM's Hugging Face tokenizer with
``truncation=True``, ``max_length=tokenizer_max_length`` and its padding. The exporter writes that
tokenizer's own fast-tokenizer definition (the ``tokenizers`` library's ``tokenizer.json``, what
transformers runs underneath) into the bundle with the truncation and padding set in it, so the
robot runs the same code on the same definition: the same ids, and the same mask. The program takes
the tokens padded to ``max_length`` (a static shape); a padded token is masked out of the policy's
attention, so that equals LeRobot's ``padding="longest"`` as well (docs/lerobot.md).

Why ``tokenizers`` and not ``openvino_tokenizers``: see docs/lerobot.md ("The tokenizer").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import numpy as np

from runtime.errors import BundleError, MissingDependencyError

TOKENIZER_FILE: Final = "tokenizer.json"
MAX_TASK_BYTES: Final = 512  # the longest task a server takes, UTF-8 encoded (docs/protocol.md)

INSTALL_HINT: Final = "pip install 'lerobot-runtime[language]' (the tokenizers library)"


def _tokenizers() -> Any:
    try:
        import tokenizers
    except ImportError as e:
        raise MissingDependencyError(
            f"this bundle's policy takes a task string, whose tokenizer needs the tokenizers library ({e}): "
            f"{INSTALL_HINT}"
        ) from e
    return tokenizers


def tokenizer_definition(hf_tokenizer: Any, *, max_length: int, padding_side: str = "right") -> str:
    """The ``tokenizer.json`` text of a transformers fast tokenizer, truncating and padding to ``max_length``.

    transformers' ``__call__(text, truncation=True, max_length=N, padding=...)`` sets exactly these
    on its backend before encoding (truncation ``longest_first`` on its ``truncation_side``; padding
    with its pad token on ``padding_side``), so the definition written here encodes as the call does.
    """
    backend = getattr(hf_tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise BundleError(
            f"the policy's tokenizer ({type(hf_tokenizer).__name__}) is not a fast tokenizer; the bundle stores "
            "the tokenizers library's definition, which only fast (Rust) tokenizers have"
        )
    if hf_tokenizer.pad_token_id is None:
        raise BundleError("the policy's tokenizer has no pad token; LeRobot pads the task with it")
    tok = _tokenizers().Tokenizer.from_str(backend.to_str())
    tok.enable_truncation(max_length, stride=0, strategy="longest_first", direction=hf_tokenizer.truncation_side)
    tok.enable_padding(
        direction=padding_side, pad_id=hf_tokenizer.pad_token_id, pad_token=hf_tokenizer.pad_token, length=max_length
    )
    text: str = tok.to_str()
    return text


class TaskTokenizer:
    """Encodes task strings as the program's tokens and mask; loaded once per engine."""

    def __init__(self, path: str | Path, *, max_length: int, append_newline: bool, text: str | None = None) -> None:
        """``text``: the definition itself (at export, before it is a file); otherwise read from ``path``."""
        self.path = Path(path)
        self.max_length = max_length
        self.append_newline = append_newline
        tokenizers = _tokenizers()
        try:
            if text is None:
                self._tok = tokenizers.Tokenizer.from_file(str(self.path))
            else:
                self._tok = tokenizers.Tokenizer.from_str(text)
        except Exception as e:  # tokenizers raises its own Exception for a bad file
            raise BundleError(f"{self.path}: not a tokenizer definition the tokenizers library reads: {e}") from e
        padding = self._tok.padding
        truncation = self._tok.truncation
        if (
            not padding
            or padding.get("length") != max_length
            or not truncation
            or truncation["max_length"] != max_length
        ):
            raise BundleError(
                f"{self.path}: expected truncation and padding to {max_length} tokens (the program's input length), "
                f"got truncation {truncation} and padding {padding}; re-export the bundle"
            )

    def encode(self, task: str) -> tuple[np.ndarray, np.ndarray]:
        """Tokens (int64) and attention mask (bool), each ``[max_length]``, as LeRobot's preprocessor makes them."""
        if self.append_newline and not task.endswith("\n"):
            task = f"{task}\n"  # SmolVLANewLineProcessor
        enc = self._tok.encode(task)
        return np.asarray(enc.ids, dtype=np.int64), np.asarray(enc.attention_mask, dtype=np.bool_)
