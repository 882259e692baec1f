"""The log's format: one line per event under journald with its syslog priority, a time and padded
level otherwise; only our own handler replaced; the noisy libraries quiet unless debugging."""

from __future__ import annotations

import io
import logging
import re
import sys
import warnings
from collections.abc import Iterator

import pytest

from runtime import log as runtime_log
from runtime.log import QUIET_LOGGERS, one_line, setup_logging


@pytest.fixture(autouse=True)
def _root_logger_back() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    quiet = {name: logging.getLogger(name).level for name in QUIET_LOGGERS}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, lvl in quiet.items():
        logging.getLogger(name).setLevel(lvl)


def capture(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    """``sys.stderr`` made a buffer for the rest of the test (set in the test body: pytest's own
    capturing sets it again between a fixture and the test)."""
    out = io.StringIO()
    monkeypatch.setattr(sys, "stderr", out)
    return out


def ours() -> list[logging.Handler]:
    return [h for h in logging.getLogger().handlers if isinstance(h, runtime_log._StderrHandler)]


def test_one_line_joins_the_non_blank_lines_stripped() -> None:
    assert one_line("  first \n\n   \n\tsecond\t\nthird") == "first | second | third"
    assert one_line("only") == "only"
    assert one_line("") == ""
    assert one_line("\n \n") == ""


def test_under_journald_each_record_is_one_line_with_its_priority(monkeypatch: pytest.MonkeyPatch) -> None:
    stderr = capture(monkeypatch)
    monkeypatch.setenv("JOURNAL_STREAM", "8:1234")
    setup_logging("DEBUG")
    log = logging.getLogger("runtime.t")
    log.critical("down")
    log.error("OpenVINO said:\n  first line\n\n  second line")
    log.warning("w")
    log.info("i")
    log.debug("d")
    log.log(25, "between info and warning")
    assert stderr.getvalue().splitlines() == [
        "<2>runtime.t: down",
        "<3>runtime.t: OpenVINO said: | first line | second line",
        "<4>runtime.t: w",
        "<6>runtime.t: i",
        "<7>runtime.t: d",
        "<6>runtime.t: between info and warning",
    ]


def test_a_traceback_is_folded_into_the_same_line(monkeypatch: pytest.MonkeyPatch) -> None:
    stderr = capture(monkeypatch)
    monkeypatch.setenv("JOURNAL_STREAM", "8:1234")
    setup_logging()
    try:
        raise ValueError("bad bundle")
    except ValueError:
        logging.getLogger("runtime.t").exception("load failed")
    (line,) = stderr.getvalue().splitlines()
    assert line.startswith("<3>runtime.t: load failed | Traceback (most recent call last): | ")
    assert line.endswith(" | ValueError: bad bundle")


def test_on_a_terminal_a_time_and_the_level_padded(monkeypatch: pytest.MonkeyPatch) -> None:
    stderr = capture(monkeypatch)
    monkeypatch.delenv("JOURNAL_STREAM", raising=False)
    setup_logging("info")
    logging.getLogger("runtime.t").info("a\nb")
    logging.getLogger("runtime.t").warning("w")
    lines = stderr.getvalue().splitlines()
    assert len(lines) == 3
    assert re.fullmatch(r"\d\d:\d\d:\d\d INFO    runtime\.t: a", lines[0]), lines[0]
    assert lines[1] == "b"  # not folded: a terminal shows it as it is
    assert re.fullmatch(r"\d\d:\d\d:\d\d WARNING runtime\.t: w", lines[2]), lines[2]


def test_an_empty_journal_stream_is_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    stderr = capture(monkeypatch)
    monkeypatch.setenv("JOURNAL_STREAM", "")
    setup_logging()
    logging.getLogger("runtime.t").info("x")
    assert re.fullmatch(r"\d\d:\d\d:\d\d INFO    runtime\.t: x\n", stderr.getvalue())


def test_the_handler_writes_to_whatever_stderr_is_now(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOURNAL_STREAM", "1:2")
    first, later = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    setup_logging()
    monkeypatch.setattr(sys, "stderr", later)
    logging.getLogger("runtime.t").warning("after the swap")
    assert first.getvalue() == ""
    assert later.getvalue() == "<4>runtime.t: after the swap\n"
    (handler,) = ours()
    handler.setStream(io.StringIO())  # the stream cannot be pinned
    assert handler.stream is sys.stderr


def test_only_our_own_handler_is_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    stderr = capture(monkeypatch)
    monkeypatch.setenv("JOURNAL_STREAM", "1:2")
    theirs = logging.StreamHandler(io.StringIO())
    logging.getLogger().addHandler(theirs)
    setup_logging()
    first = ours()
    setup_logging()
    second = ours()
    assert len(first) == 1 and len(second) == 1 and first[0] is not second[0]
    assert theirs in logging.getLogger().handlers
    logging.getLogger("runtime.t").warning("once")
    assert stderr.getvalue() == "<4>runtime.t: once\n"


@pytest.mark.parametrize(
    ("level", "expected"), [("INFO", logging.INFO), ("warning", logging.WARNING), (logging.DEBUG, logging.DEBUG)]
)
def test_the_level_by_name_in_any_case_or_by_number(
    monkeypatch: pytest.MonkeyPatch, level: str | int, expected: int
) -> None:
    capture(monkeypatch)
    setup_logging(level)
    assert logging.getLogger().level == expected


def test_the_default_level_is_info(monkeypatch: pytest.MonkeyPatch) -> None:
    capture(monkeypatch)
    logging.getLogger().setLevel(logging.DEBUG)
    setup_logging()
    assert logging.getLogger().level == logging.INFO


def test_noisy_libraries_show_only_errors_unless_debugging(monkeypatch: pytest.MonkeyPatch) -> None:
    capture(monkeypatch)
    assert QUIET_LOGGERS == ("torchao", "torch.utils._pytree")
    setup_logging("INFO")
    assert [logging.getLogger(n).level for n in QUIET_LOGGERS] == [logging.ERROR, logging.ERROR]
    setup_logging("DEBUG")
    assert [logging.getLogger(n).level for n in QUIET_LOGGERS] == [logging.NOTSET, logging.NOTSET]


def warned(level: str, category: type[Warning], module: str) -> int:
    """How many warnings ``module`` raising ``category`` shows after ``setup_logging(level)``, with no
    filter but its own in front of "always"."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.resetwarnings()
        warnings.simplefilter("always")
        setup_logging(level)
        warnings.warn_explicit("noise", category, "f.py", 1, module=module)
    return len(seen)


@pytest.mark.parametrize("category", [DeprecationWarning, FutureWarning, UserWarning])
@pytest.mark.parametrize("module", ["torch", "torchao.quantization", "executorch.exir", "nncf", "copyreg"])
def test_the_libraries_warnings_are_ignored_unless_debugging(
    monkeypatch: pytest.MonkeyPatch, category: type[Warning], module: str
) -> None:
    capture(monkeypatch)
    assert warned("INFO", category, module) == 0
    assert warned("DEBUG", category, module) == 1


@pytest.mark.parametrize(
    ("module", "category"),
    [
        ("runtime.engine", DeprecationWarning),  # ours
        ("torchvision", UserWarning),  # not one of the listed libraries
        ("nncfx", UserWarning),
        ("mytorch", UserWarning),
        ("torch", RuntimeWarning),  # not a listed category
    ],
)
def test_other_warnings_still_show(monkeypatch: pytest.MonkeyPatch, module: str, category: type[Warning]) -> None:
    capture(monkeypatch)
    assert warned("INFO", category, module) == 1
