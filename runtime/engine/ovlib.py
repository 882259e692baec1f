"""OpenVINO's own error text, read through its C API.

ExecuTorch's OpenVINO backend (1.5.1) reports a failed inference only as a status code. OpenVINO keeps
the full exception text of the last failed C API call in a global that ``ov_get_last_err_msg()``
returns. It must be read right after the failure and on the *same* library the backend loaded: the
backend dlopens ``libopenvino_c.so`` itself, so the path is taken from this process's memory map, and
``dlopen`` of an already loaded path hands back that same handle.
"""

from __future__ import annotations

import ctypes
import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

_LIB_NAME = "libopenvino_c.so"
_handle: ctypes.CDLL | None = None


def loaded_library_path(maps: str | os.PathLike[str] = "/proc/self/maps") -> str | None:
    """Path of the ``libopenvino_c`` this process has mapped, if any (``maps``: a proc(5) memory map).

    A line is "address perms offset dev inode pathname"; the path is the rest of the line after the
    fifth field, spaces included (a virtualenv under "My Projects" is a path with a space).
    """
    try:
        with open(maps) as lines:
            for line in lines:
                fields = line.rstrip("\n").split(None, 5)
                if len(fields) == 6 and _LIB_NAME in os.path.basename(fields[5]):
                    return fields[5]
    except OSError:
        return None
    return None


def _candidate_path() -> str | None:
    path = loaded_library_path()
    if path:
        return path
    env = os.environ.get("OPENVINO_LIB_PATH")
    if env:
        return env
    try:
        import openvino

        libs = Path(openvino.__file__).parent / "libs"
        found = sorted(libs.glob(f"{_LIB_NAME}*"))
        return str(found[0]) if found else None
    except ImportError:
        return None


def _library() -> ctypes.CDLL | None:
    global _handle
    if _handle is None:
        path = _candidate_path()
        if path is None:
            return None
        try:
            lib = ctypes.CDLL(path)
            lib.ov_get_last_err_msg.restype = ctypes.c_void_p
            lib.ov_get_last_err_msg.argtypes = []
            lib.ov_free.restype = None
            lib.ov_free.argtypes = [ctypes.c_void_p]
        except (OSError, AttributeError) as e:
            log.warning("cannot open %s to read OpenVINO error messages: %s", path, e)
            return None
        _handle = lib
    return _handle


def last_error_message() -> str | None:
    """OpenVINO's text for the last failed C API call in this process, or None when there is none."""
    lib = _library()
    if lib is None:
        return None
    ptr = lib.ov_get_last_err_msg()
    if not ptr:
        return None
    try:
        text = ctypes.string_at(ptr).decode("utf-8", errors="replace").strip()
    finally:
        lib.ov_free(ptr)
    return text or None
