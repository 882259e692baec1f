"""A request's task string to the program's language inputs: checked, tokenized once per distinct task.

A language policy (SmolVLA: the manifest's ``language`` section) needs a task with every inference;
a policy without one takes none, and a task sent to it is refused rather than ignored, so nobody
believes a policy follows an instruction it never reads. A task is a string of at most
``max_task_bytes`` bytes in UTF-8 (the codec has already refused bytes that are not UTF-8). Encoding
runs the bundle's tokenizer (runtime.bundle.tokenizer); a robot repeats the same few tasks, so the
tokens of the last :data:`CACHE_SIZE` distinct tasks are kept, and a task costs a dictionary lookup.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Final

import numpy as np

from runtime.bundle.manifest import Manifest
from runtime.errors import InputValidationError

CACHE_SIZE: Final = 64  # distinct tasks whose tokens are kept (a few KB each at most)
FIELD: Final = "task"


def task_error(takes_task: bool, task: Any, max_bytes: int) -> InputValidationError | None:
    """Why ``task`` cannot go with a request to this policy, or None when it can."""
    if not takes_task:
        if task is None:
            return None
        return InputValidationError(
            "task: this policy takes no task (it is not a language policy); send no task",
            field=FIELD,
            expected="no task",
            received=f"{type(task).__name__} task",
        )
    if task is None:
        return InputValidationError(
            "task: this policy is a language policy and needs a task string with every observation "
            '(e.g. "pick up the red cube")',
            field=FIELD,
            expected=f"a UTF-8 string of at most {max_bytes} bytes",
            received="nothing",
        )
    if not isinstance(task, str):
        return InputValidationError(
            f"task: expected a UTF-8 string, got {type(task).__name__}",
            field=FIELD,
            expected=f"a UTF-8 string of at most {max_bytes} bytes",
            received=type(task).__name__,
        )
    try:
        size = len(task.encode("utf-8"))
    except UnicodeEncodeError:  # lone surrogates: a str that is not text
        return InputValidationError(
            "task: not valid Unicode text (lone surrogates)",
            field=FIELD,
            expected="a UTF-8 string",
            received="a string with lone surrogates",
        )
    if size > max_bytes:
        return InputValidationError(
            f"task: {size} bytes in UTF-8, over this policy's limit of {max_bytes}",
            field=FIELD,
            expected=f"at most {max_bytes} bytes in UTF-8",
            received=f"{size} bytes",
        )
    return None


class TaskEncoder:
    """The bundle's tokenizer behind a bounded cache; safe to call from several threads."""

    def __init__(self, manifest: Manifest, bundle_path: str | Path, *, cache_size: int = CACHE_SIZE) -> None:
        from runtime.bundle.bundle import Bundle
        from runtime.bundle.tokenizer import TaskTokenizer

        language = manifest.language
        if language is None:
            raise ValueError("TaskEncoder: the manifest has no language section")
        self.max_bytes = language.max_task_bytes
        self.cache_size = cache_size
        path = Bundle(Path(bundle_path), manifest).tokenizer_file()
        self._tokenizer = TaskTokenizer(path, max_length=language.max_length, append_newline=language.append_newline)
        self._cache: OrderedDict[str, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._lock = threading.Lock()
        self.encoded = 0  # tasks run through the tokenizer (cache misses)

    def encode(self, task: str) -> tuple[np.ndarray, np.ndarray]:
        """Tokens and mask for a checked task (see :func:`task_error`); read-only arrays, shared."""
        with self._lock:
            hit = self._cache.get(task)
            if hit is not None:
                self._cache.move_to_end(task)
                return hit
        ids, mask = self._tokenizer.encode(task)
        ids.flags.writeable = False
        mask.flags.writeable = False
        with self._lock:
            self._cache[task] = (ids, mask)
            self.encoded += 1
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return ids, mask

    def __len__(self) -> int:
        return len(self._cache)
