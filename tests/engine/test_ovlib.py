"""Finding OpenVINO's C library and reading its last error text, on memory maps and libraries the test makes."""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import types
from pathlib import Path

import pytest

from runtime.engine import ovlib

LIB = "/opt/intel/openvino/runtime/lib/intel64/libopenvino_c.so.2541"


def maps_file(tmp_path: Path, *paths: str) -> Path:
    """A proc(5) memory map with one mapping per path ("" for an anonymous mapping)."""
    lines = [
        f"7f{n:04x}000-7f{n:04x}fff r-xp 00000000 08:01 {1000 + n:<10d}              {p}".rstrip()
        for n, p in enumerate(paths)
    ]
    out = tmp_path / "maps"
    out.write_text("\n".join(lines) + "\n")
    return out


@pytest.fixture(autouse=True)
def no_handle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ovlib, "_handle", None)
    monkeypatch.delenv("OPENVINO_LIB_PATH", raising=False)


# --- loaded_library_path ---------------------------------------------------------------------------


def test_the_mapped_library_path_is_read_from_the_memory_map(tmp_path: Path) -> None:
    maps = maps_file(tmp_path, "/usr/lib/libc.so.6", "", "[heap]", LIB, "/usr/lib/libm.so.6")
    assert ovlib.loaded_library_path(maps) == LIB


def test_a_library_path_with_spaces_is_read_whole(tmp_path: Path) -> None:
    lib = "/home/me/My Projects/robot arm/.venv/lib/python3.11/site-packages/openvino/libs/libopenvino_c.so.2541"
    assert ovlib.loaded_library_path(maps_file(tmp_path, "/usr/lib/libc.so.6", lib)) == lib


def test_the_first_mapping_of_the_library_is_taken(tmp_path: Path) -> None:
    other = "/elsewhere/libopenvino_c.so"
    assert ovlib.loaded_library_path(maps_file(tmp_path, LIB, other)) == LIB


def test_no_mapping_of_the_library_is_none(tmp_path: Path) -> None:
    maps = maps_file(tmp_path, "/usr/lib/libc.so.6", "", "/usr/lib/libopenvino.so.2541")
    assert ovlib.loaded_library_path(maps) is None


def test_a_directory_named_like_the_library_is_not_the_library(tmp_path: Path) -> None:
    maps = maps_file(tmp_path, "/opt/libopenvino_c.so.d/libother.so", LIB)
    assert ovlib.loaded_library_path(maps) == LIB


def test_an_unreadable_memory_map_is_none(tmp_path: Path) -> None:
    assert ovlib.loaded_library_path(tmp_path / "missing") is None


def test_this_process_map_is_read_by_default() -> None:
    import openvino

    lib = sorted((Path(openvino.__file__).parent / "libs").glob("libopenvino_c.so*"))[0]
    ctypes.CDLL(str(lib))  # mapped now, as the executorch backend's dlopen maps it
    found = ovlib.loaded_library_path()
    assert found is not None and os.path.samefile(found, lib)


# --- _candidate_path -------------------------------------------------------------------------------


def fake_openvino(monkeypatch: pytest.MonkeyPatch, root: Path, *libs: str) -> None:
    (root / "libs").mkdir(parents=True)
    for name in libs:
        (root / "libs" / name).write_bytes(b"")
    module = types.ModuleType("openvino")
    module.__file__ = str(root / "__init__.py")
    monkeypatch.setitem(sys.modules, "openvino", module)


def test_the_mapped_library_comes_first(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(ovlib, "loaded_library_path", lambda: LIB)
    monkeypatch.setenv("OPENVINO_LIB_PATH", "/from/env/libopenvino_c.so")
    assert ovlib._candidate_path() == LIB


def test_the_environment_names_the_library_when_none_is_mapped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ovlib, "loaded_library_path", lambda: None)
    monkeypatch.setenv("OPENVINO_LIB_PATH", "/from/env/libopenvino_c.so")
    assert ovlib._candidate_path() == "/from/env/libopenvino_c.so"


def test_an_empty_environment_variable_is_not_a_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(ovlib, "loaded_library_path", lambda: None)
    monkeypatch.setenv("OPENVINO_LIB_PATH", "")
    fake_openvino(monkeypatch, tmp_path / "openvino", "libopenvino_c.so.2541")
    assert ovlib._candidate_path() == str(tmp_path / "openvino" / "libs" / "libopenvino_c.so.2541")


def test_the_package_libs_give_the_first_library_by_name(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(ovlib, "loaded_library_path", lambda: None)
    fake_openvino(
        monkeypatch, tmp_path / "openvino", "libopenvino_c.so.2541", "libopenvino.so", "libopenvino_c.so.2540"
    )
    assert ovlib._candidate_path() == str(tmp_path / "openvino" / "libs" / "libopenvino_c.so.2540")


def test_a_package_without_the_library_is_none(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(ovlib, "loaded_library_path", lambda: None)
    fake_openvino(monkeypatch, tmp_path / "openvino", "libopenvino.so.2541")
    assert ovlib._candidate_path() is None


def test_no_openvino_package_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ovlib, "loaded_library_path", lambda: None)
    monkeypatch.setitem(sys.modules, "openvino", None)  # import raises ImportError
    assert ovlib._candidate_path() is None


def test_the_installed_package_has_the_library(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ovlib, "loaded_library_path", lambda: None)
    path = ovlib._candidate_path()
    assert path is not None and Path(path).name.startswith("libopenvino_c.so") and Path(path).is_file()


# --- _library and last_error_message, on a stand-in library ----------------------------------------


class Func:
    """A C function of the stand-in library: its restype and argtypes as set, its calls recorded."""

    def __init__(self, result: object = None) -> None:
        self.result = result
        self.calls: list[tuple[object, ...]] = []
        self.restype: object = "unset"
        self.argtypes: object = "unset"

    def __call__(self, *args: object) -> object:
        self.calls.append(args)
        return self.result


class FakeLib:
    def __init__(self, message: bytes | None) -> None:
        self.buffer = None if message is None else ctypes.create_string_buffer(message)
        self.ov_get_last_err_msg = Func(None if self.buffer is None else ctypes.addressof(self.buffer))
        self.ov_free = Func()


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths handed to ctypes.CDLL (see ``use``), the library found at /x/libopenvino_c.so."""
    paths: list[str] = []
    monkeypatch.setattr(ovlib, "_candidate_path", lambda: "/x/libopenvino_c.so")
    return paths


def use(monkeypatch: pytest.MonkeyPatch, lib: object, paths: list[str]) -> None:
    def cdll(path: str) -> object:
        paths.append(path)
        return lib

    monkeypatch.setattr(ctypes, "CDLL", cdll)


def test_the_error_text_is_read_decoded_stripped_and_freed(monkeypatch: pytest.MonkeyPatch, opened: list[str]) -> None:
    lib = FakeLib(b"  Exception from src/inference/src/infer_request.cpp:79: shape mismatch\n")
    use(monkeypatch, lib, opened)
    assert ovlib.last_error_message() == "Exception from src/inference/src/infer_request.cpp:79: shape mismatch"
    assert opened == ["/x/libopenvino_c.so"]
    assert lib.ov_get_last_err_msg.calls == [()]
    assert lib.ov_free.calls == [(ctypes.addressof(lib.buffer),)]  # type: ignore[arg-type]
    assert (lib.ov_get_last_err_msg.restype, lib.ov_get_last_err_msg.argtypes) == (ctypes.c_void_p, [])
    assert (lib.ov_free.restype, lib.ov_free.argtypes) == (None, [ctypes.c_void_p])


def test_the_library_is_opened_once(monkeypatch: pytest.MonkeyPatch, opened: list[str]) -> None:
    lib = FakeLib(b"first")
    use(monkeypatch, lib, opened)
    assert ovlib.last_error_message() == "first"
    assert ovlib.last_error_message() == "first"
    handle: object = ovlib._handle
    assert opened == ["/x/libopenvino_c.so"] and handle is lib
    assert len(lib.ov_get_last_err_msg.calls) == 2 and len(lib.ov_free.calls) == 2


def test_bytes_that_are_not_utf8_are_replaced(monkeypatch: pytest.MonkeyPatch, opened: list[str]) -> None:
    use(monkeypatch, FakeLib(b"bad \xff byte"), opened)
    assert ovlib.last_error_message() == "bad \ufffd byte"


def test_no_error_recorded_is_none(monkeypatch: pytest.MonkeyPatch, opened: list[str]) -> None:
    lib = FakeLib(None)
    use(monkeypatch, lib, opened)
    assert ovlib.last_error_message() is None
    assert lib.ov_free.calls == []  # nothing to free


def test_an_empty_or_blank_text_is_none_and_still_freed(monkeypatch: pytest.MonkeyPatch, opened: list[str]) -> None:
    lib = FakeLib(b" \n ")
    use(monkeypatch, lib, opened)
    assert ovlib.last_error_message() is None
    assert len(lib.ov_free.calls) == 1


def test_the_text_is_freed_when_reading_it_fails(monkeypatch: pytest.MonkeyPatch, opened: list[str]) -> None:
    lib = FakeLib(b"text")
    use(monkeypatch, lib, opened)

    def broken(ptr: object) -> bytes:
        raise MemoryError("cannot copy")

    monkeypatch.setattr(ctypes, "string_at", broken)
    with pytest.raises(MemoryError):
        ovlib.last_error_message()
    assert len(lib.ov_free.calls) == 1


def test_no_library_found_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ovlib, "_candidate_path", lambda: None)
    opened: list[str] = []
    use(monkeypatch, FakeLib(b"never read"), opened)
    assert ovlib.last_error_message() is None
    assert opened == [] and ovlib._handle is None


def test_a_library_that_cannot_be_opened_is_logged_and_none(
    monkeypatch: pytest.MonkeyPatch, opened: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    def cdll(path: str) -> object:
        raise OSError(f"{path}: cannot open shared object file: No such file or directory")

    monkeypatch.setattr(ctypes, "CDLL", cdll)
    with caplog.at_level(logging.WARNING, logger="runtime.engine.ovlib"):
        assert ovlib.last_error_message() is None
    assert ovlib._handle is None
    assert [r.getMessage() for r in caplog.records] == [
        "cannot open /x/libopenvino_c.so to read OpenVINO error messages: "
        "/x/libopenvino_c.so: cannot open shared object file: No such file or directory"
    ]


def test_a_library_without_the_error_functions_is_none(
    monkeypatch: pytest.MonkeyPatch, opened: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    class NoFree:
        def __init__(self) -> None:
            self.ov_get_last_err_msg = Func(None)

    use(monkeypatch, NoFree(), opened)
    with caplog.at_level(logging.WARNING, logger="runtime.engine.ovlib"):
        assert ovlib.last_error_message() is None
    assert ovlib._handle is None
    assert len(caplog.records) == 1
    message = caplog.records[0].getMessage()
    assert message.startswith("cannot open /x/libopenvino_c.so to read OpenVINO error messages: ")


def test_the_real_library_has_no_error_before_any_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    # the installed package's library, opened for real: its functions exist and answer
    monkeypatch.setattr(ovlib, "loaded_library_path", lambda: None)
    lib = ovlib._library()
    assert lib is not None and ovlib._library() is lib
    message = ovlib.last_error_message()
    assert message is None or isinstance(message, str)
