"""A language policy's task string to its token inputs, on a small word-level tokenizer made here.

No Hugging Face download: a ``tokenizers`` definition built in the test and a stand-in for the
transformers fast tokenizer that ``tokenizer_definition`` is given at export.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from runtime.bundle.tokenizer import (
    INSTALL_HINT,
    MAX_TASK_BYTES,
    TOKENIZER_FILE,
    TaskTokenizer,
    tokenizer_definition,
)
from runtime.errors import BundleError, MissingDependencyError

VOCAB = {"<pad>": 0, "<unk>": 1, "pick": 2, "up": 3, "the": 4, "cube": 5, "cube\n": 6, "red": 7}


def _backend() -> Tokenizer:
    tok = Tokenizer(models.WordLevel(VOCAB, unk_token="<unk>"))
    # split on spaces only: "cube\n" stays one word, so the appended newline shows in the ids
    tok.pre_tokenizer = pre_tokenizers.Split(" ", behavior="removed")
    return tok


@dataclass
class FastTokenizer:
    """What tokenizer_definition reads of a transformers fast tokenizer."""

    backend_tokenizer: Tokenizer | None
    pad_token_id: int | None = 0
    pad_token: str = "<pad>"
    truncation_side: str = "right"


def _definition(max_length: int = 6, **kw: Any) -> str:
    return tokenizer_definition(FastTokenizer(_backend(), **kw), max_length=max_length)


def test_names_and_limits() -> None:
    assert (TOKENIZER_FILE, MAX_TASK_BYTES) == ("tokenizer.json", 512)
    assert INSTALL_HINT == "pip install 'lerobot-runtime[language]' (the tokenizers library)"


def test_the_definition_truncates_and_pads_to_max_length() -> None:
    tok = Tokenizer.from_str(_definition(6))
    assert tok.truncation == {"max_length": 6, "stride": 0, "strategy": "longest_first", "direction": "right"}
    assert tok.padding == {
        "length": 6,
        "pad_to_multiple_of": None,
        "pad_id": 0,
        "pad_token": "<pad>",
        "pad_type_id": 0,
        "direction": "right",
    }


def test_the_definition_takes_the_tokenizers_truncation_side_and_the_padding_side() -> None:
    text = tokenizer_definition(
        FastTokenizer(_backend(), pad_token_id=7, pad_token="red", truncation_side="left"),
        max_length=3,
        padding_side="left",
    )
    tok = Tokenizer.from_str(text)
    assert tok.truncation is not None and tok.truncation["direction"] == "left"
    assert tok.padding is not None
    assert (tok.padding["direction"], tok.padding["pad_id"], tok.padding["pad_token"]) == ("left", 7, "red")
    assert tok.encode("pick").ids == [7, 7, 2]
    assert tok.encode("pick up the cube").ids == [3, 4, 5]


def test_a_tokenizer_that_is_not_fast_is_refused() -> None:
    with pytest.raises(BundleError) as e:
        tokenizer_definition(FastTokenizer(None), max_length=4)
    assert str(e.value) == (
        "the policy's tokenizer (FastTokenizer) is not a fast tokenizer; the bundle stores the tokenizers "
        "library's definition, which only fast (Rust) tokenizers have"
    )

    class Slow:
        pad_token_id = 0

    with pytest.raises(BundleError, match=r"^the policy's tokenizer \(Slow\) is not a fast tokenizer"):
        tokenizer_definition(Slow(), max_length=4)


def test_a_tokenizer_without_a_pad_token_is_refused() -> None:
    with pytest.raises(BundleError) as e:
        tokenizer_definition(FastTokenizer(_backend(), pad_token_id=None), max_length=4)
    assert str(e.value) == "the policy's tokenizer has no pad token; LeRobot pads the task with it"


def test_encode_pads_with_a_mask_and_truncates(tmp_path: Path) -> None:
    path = tmp_path / TOKENIZER_FILE
    path.write_text(_definition(6))
    tok = TaskTokenizer(path, max_length=6, append_newline=False)
    assert (tok.path, tok.max_length, tok.append_newline) == (path, 6, False)
    ids, mask = tok.encode("pick up the cube")
    assert ids.dtype == np.int64 and mask.dtype == np.bool_
    assert ids.tolist() == [2, 3, 4, 5, 0, 0]
    assert mask.tolist() == [True, True, True, True, False, False]
    ids, mask = tok.encode("pick up the red cube up the")
    assert ids.tolist() == [2, 3, 4, 7, 5, 3] and mask.all()


def test_a_newline_is_appended_when_asked_and_not_doubled() -> None:
    tok = TaskTokenizer("unused.json", max_length=5, append_newline=True, text=_definition(5))
    assert tok.encode("the cube")[0].tolist() == [4, 6, 0, 0, 0]
    assert tok.encode("the cube\n")[0].tolist() == [4, 6, 0, 0, 0]
    plain = TaskTokenizer("unused.json", max_length=5, append_newline=False, text=_definition(5))
    assert plain.encode("the cube")[0].tolist() == [4, 5, 0, 0, 0]


def test_text_is_used_instead_of_the_file(tmp_path: Path) -> None:
    tok = TaskTokenizer(tmp_path / "not-there.json", max_length=4, append_newline=False, text=_definition(4))
    assert tok.path == tmp_path / "not-there.json"
    assert tok.encode("red")[0].tolist() == [7, 0, 0, 0]


def test_a_file_the_library_cannot_read_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / TOKENIZER_FILE
    path.write_text("{not json")
    with pytest.raises(BundleError) as e:
        TaskTokenizer(path, max_length=4, append_newline=False)
    assert str(e.value).startswith(f"{path}: not a tokenizer definition the tokenizers library reads: ")
    assert len(str(e.value)) > len(f"{path}: not a tokenizer definition the tokenizers library reads: ")
    with pytest.raises(BundleError, match=r"^bad\.json: not a tokenizer definition the tokenizers library reads: "):
        TaskTokenizer("bad.json", max_length=4, append_newline=False, text="[]")
    with pytest.raises(BundleError, match="not a tokenizer definition"):
        TaskTokenizer(tmp_path / "missing.json", max_length=4, append_newline=False)


def _refused(text: str, max_length: int) -> str:
    with pytest.raises(BundleError) as e:
        TaskTokenizer("t.json", max_length=max_length, append_newline=False, text=text)
    return str(e.value)


def _expected(text: str, max_length: int) -> str:
    tok = Tokenizer.from_str(text)
    return (
        f"t.json: expected truncation and padding to {max_length} tokens (the program's input length), "
        f"got truncation {tok.truncation} and padding {tok.padding}; re-export the bundle"
    )


def test_a_definition_without_truncation_or_padding_to_the_input_length_is_refused() -> None:
    bare = _backend().to_str()
    assert _refused(bare, 4) == (
        "t.json: expected truncation and padding to 4 tokens (the program's input length), "
        "got truncation None and padding None; re-export the bundle"
    )
    for text, length in ((_definition(6), 5), (_definition(6), 7)):
        assert _refused(text, length) == _expected(text, length)
    only_padding = _backend()
    only_padding.enable_padding(pad_id=0, pad_token="<pad>", length=4)
    assert _refused(only_padding.to_str(), 4) == _expected(only_padding.to_str(), 4)
    only_truncation = _backend()
    only_truncation.enable_truncation(4)
    assert _refused(only_truncation.to_str(), 4) == _expected(only_truncation.to_str(), 4)
    # truncation to the length, padding to another (or to the longest: no length at all)
    mixed = json.loads(_definition(4))
    mixed["padding"]["strategy"] = {"Fixed": 5}
    assert _refused(json.dumps(mixed), 4) == _expected(json.dumps(mixed), 4)
    mixed["padding"]["strategy"] = "BatchLongest"
    assert _refused(json.dumps(mixed), 4) == _expected(json.dumps(mixed), 4)
    mixed = json.loads(_definition(4))
    mixed["truncation"]["max_length"] = 5
    assert _refused(json.dumps(mixed), 4) == _expected(json.dumps(mixed), 4)


def test_without_the_tokenizers_library_the_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(MissingDependencyError) as e:
        TaskTokenizer("t.json", max_length=4, append_newline=False, text="{}")
    assert str(e.value) == (
        "this bundle's policy takes a task string, whose tokenizer needs the tokenizers library "
        "(import of tokenizers halted; None in sys.modules): "
        "pip install 'lerobot-runtime[language]' (the tokenizers library)"
    )
    assert isinstance(e.value.__cause__, ImportError)
