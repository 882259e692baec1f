"""A bundle whose files changed after export is refused, naming the file, the field and both digests.

The bundle is written by hand here (no export): programs of arbitrary bytes, a real ``.npz`` test
case, a manifest with the sha256 of each worked out with hashlib, not with the code under test.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from runtime.bundle.bundle import Bundle, sha256_bytes, sha256_file
from runtime.errors import BundleError, BundleFileNotFoundError, DeviceError

# Larger than the 1 MiB block the file hash reads, so a change past the first block counts too.
CPU_PROGRAM = bytes(range(256)) * 6000 + b"tail"
GPU_PROGRAM = b"a smaller program for the gpu"
PORTABLE = b"portable exported program"
SHAPES = {"observation.images.front": ((4, 4, 3), np.uint8), "observation.state": ((6,), np.float32)}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _case_bytes(**extra: np.ndarray) -> bytes:
    arrays: dict[str, np.ndarray] = {
        f"input/{name}": np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)
        for name, (shape, dtype) in SHAPES.items()
    }
    arrays["output/action"] = np.linspace(-1, 1, 60, dtype=np.float32).reshape(10, 6)
    arrays.update(extra)
    buf = io.BytesIO()
    np.savez(buf, **arrays)  # type: ignore[arg-type]
    return buf.getvalue()


def _manifest(case: bytes) -> dict[str, Any]:
    program = {"precision": "f32", "delegation": "full", "openvino_version": "x"}
    return {
        "format": "lerobot-runtime-bundle",
        "format_version": 1,
        "policy": {"name": "p"},
        "inputs": [
            {"name": "observation.images.front", "dtype": "uint8", "shape": [4, 4, 3], "role": "image"},
            {"name": "observation.state", "dtype": "float32", "shape": [6], "role": "state"},
        ],
        "outputs": [{"name": "action", "dtype": "float32", "shape": [10, 6], "role": "action"}],
        "action": {"output": "action", "chunk_length": 10, "names": ["a", "b", "c", "d", "e", "f"]},
        "control_rate_hz": 30,
        "programs": {
            "CPU": {"file": "program_cpu.pte", "sha256": _sha(CPU_PROGRAM), **program},
            "GPU": {"file": "program_gpu.pte", "sha256": _sha(GPU_PROGRAM), **program},
        },
        "test_case": {
            "file": "test_case.npz",
            "sha256": _sha(case),
            "tolerance": {"f32": 1e-4},
            "scale": {"action": [1, 2, 3, 4, 5, 6]},
            "scale_source": "std",
        },
        "portable_program": {"file": "program.pt2", "sha256": _sha(PORTABLE)},
    }


def _write(root: Path, manifest: dict[str, Any], files: dict[str, bytes]) -> Path:
    root.mkdir(exist_ok=True)
    for name, data in files.items():
        (root / name).write_bytes(data)
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root


@pytest.fixture
def bundle_dir(tmp_path: Path) -> Path:
    case = _case_bytes()
    files = {
        "program_cpu.pte": CPU_PROGRAM,
        "program_gpu.pte": GPU_PROGRAM,
        "test_case.npz": case,
        "program.pt2": PORTABLE,
    }
    return _write(tmp_path / "bundle", _manifest(case), files)


def _tamper(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def _mismatch(bundle: Path, name: str, field: str, expected: str) -> str:
    got = _sha((bundle / name).read_bytes())
    return (
        f"{bundle / name}: sha256 {got} does not match the manifest's {field}.sha256 {expected}; "
        "the file was changed or damaged after export"
    )


def _missing(bundle: Path, field: str, name: str) -> str:
    return f"{bundle / 'manifest.json'}: field '{field}' names {name}, which is not in {bundle}"


def test_the_hashes_are_sha256_of_the_whole_content(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(CPU_PROGRAM)
    assert sha256_file(f) == _sha(CPU_PROGRAM)
    assert sha256_bytes(CPU_PROGRAM) == _sha(CPU_PROGRAM)
    assert sha256_bytes(memoryview(GPU_PROGRAM)) == _sha(GPU_PROGRAM)
    f.write_bytes(b"")
    assert sha256_file(f) == _sha(b"")


def test_an_intact_bundle_opens_verified_and_reads_what_was_written(bundle_dir: Path) -> None:
    bundle = Bundle.open(bundle_dir, verify_all=True)
    assert bundle.path == bundle_dir
    assert bundle.read_program("CPU") == CPU_PROGRAM
    assert bundle.read_program("GPU") == GPU_PROGRAM
    view = bundle.map_program("CPU")
    assert bytes(view) == CPU_PROGRAM
    assert not view.readonly  # OpenVINO imports straight out of a writable buffer
    case = bundle.test_case()
    assert set(case.inputs) == set(SHAPES)
    np.testing.assert_array_equal(case.inputs["observation.state"], np.arange(6, dtype=np.float32))
    np.testing.assert_array_equal(case.outputs["action"], np.linspace(-1, 1, 60, dtype=np.float32).reshape(10, 6))
    assert set(case.outputs) == {"action"}
    assert case.tolerance["f32"] == 1e-4
    assert case.scale == {"action": (1.0, 2.0, 3.0, 4.0, 5.0, 6.0)}
    assert case.scale_source == "std"


@pytest.mark.parametrize(
    ("name", "field", "at"),
    [
        ("program_cpu.pte", "programs.CPU", len(CPU_PROGRAM) - 2),  # past the first MiB
        ("program_cpu.pte", "programs.CPU", 0),
        ("program_gpu.pte", "programs.GPU", 3),
        ("test_case.npz", "test_case", 40),
        ("program.pt2", "portable_program", 1),
    ],
)
def test_an_altered_file_is_refused_when_every_file_is_verified(
    bundle_dir: Path, name: str, field: str, at: int
) -> None:
    expected = _manifest(_case_bytes())
    sha = expected[field.split(".")[0]]
    sha = sha[field.split(".")[1]]["sha256"] if "." in field else sha["sha256"]
    _tamper(bundle_dir / name, at)
    Bundle.open(bundle_dir)  # without verify_all only existence is checked
    with pytest.raises(BundleError) as err:
        Bundle.open(bundle_dir, verify_all=True)
    assert str(err.value) == _mismatch(bundle_dir, name, field, sha)


@pytest.mark.parametrize("device", ["CPU", "GPU"])
def test_an_altered_program_is_refused_when_it_is_read(bundle_dir: Path, device: str) -> None:
    name = f"program_{device.lower()}.pte"
    sha = _sha(CPU_PROGRAM if device == "CPU" else GPU_PROGRAM)
    bundle = Bundle.open(bundle_dir)
    _tamper(bundle_dir / name, 5)
    want = _mismatch(bundle_dir, name, f"programs.{device}", sha)
    with pytest.raises(BundleError) as err:
        bundle.read_program(device)
    assert str(err.value) == want
    with pytest.raises(BundleError) as err:
        bundle.map_program(device)  # the path the engines load from
    assert str(err.value) == want


def test_a_truncated_program_is_refused_when_it_is_mapped(bundle_dir: Path) -> None:
    bundle = Bundle.open(bundle_dir)
    (bundle_dir / "program_cpu.pte").write_bytes(CPU_PROGRAM[:-1])
    with pytest.raises(BundleError) as err:
        bundle.map_program("CPU")
    assert str(err.value) == _mismatch(bundle_dir, "program_cpu.pte", "programs.CPU", _sha(CPU_PROGRAM))


def test_an_altered_test_case_is_refused_when_it_is_read(bundle_dir: Path) -> None:
    bundle = Bundle.open(bundle_dir)
    # still a readable .npz, with other reference numbers: only the digest tells
    other = _case_bytes(**{"output/action": np.zeros((10, 6), np.float32)})
    (bundle_dir / "test_case.npz").write_bytes(other)
    with pytest.raises(BundleError) as err:
        bundle.test_case()
    assert str(err.value) == _mismatch(bundle_dir, "test_case.npz", "test_case", _sha(_case_bytes()))


@pytest.mark.parametrize(
    ("name", "field"),
    [
        ("program_cpu.pte", "programs.CPU.file"),
        ("program_gpu.pte", "programs.GPU.file"),
        ("test_case.npz", "test_case.file"),
        ("program.pt2", "portable_program.file"),
    ],
)
def test_a_missing_file_is_refused_on_open_naming_its_field(bundle_dir: Path, name: str, field: str) -> None:
    (bundle_dir / name).unlink()
    with pytest.raises(BundleFileNotFoundError) as err:
        Bundle.open(bundle_dir)
    assert str(err.value) == _missing(bundle_dir, field, name)


def test_a_directory_in_place_of_a_file_is_refused(bundle_dir: Path) -> None:
    (bundle_dir / "program.pt2").unlink()
    (bundle_dir / "program.pt2").mkdir()
    with pytest.raises(BundleFileNotFoundError, match=r"field 'portable_program\.file' names program\.pt2"):
        Bundle.open(bundle_dir)


@pytest.mark.parametrize("name", ["../program_cpu.pte", "sub/x.npz", "a\\b.npz", "", ".", ".."])
def test_a_file_name_outside_the_bundle_is_refused(bundle_dir: Path, name: str) -> None:
    manifest = json.loads((bundle_dir / "manifest.json").read_text())
    manifest["test_case"]["file"] = name
    (bundle_dir / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError) as err:
        Bundle.open(bundle_dir)
    assert str(err.value) == (
        f"{bundle_dir / 'manifest.json'}: field 'test_case.file': expected a file name inside the bundle, got {name!r}"
    )


def test_not_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BundleError) as err:
        Bundle.open(tmp_path / "absent")
    assert str(err.value) == f"{tmp_path / 'absent'}: not a bundle directory (expected a folder with manifest.json)"
    (tmp_path / "file").write_text("{}")
    with pytest.raises(BundleError, match="not a bundle directory"):
        Bundle.open(str(tmp_path / "file"))


def test_a_device_without_a_program_names_the_ones_there_are(bundle_dir: Path) -> None:
    bundle = Bundle.open(bundle_dir)
    assert bundle.program("GPU").file == "program_gpu.pte"
    with pytest.raises(DeviceError) as err:
        bundle.read_program("NPU")
    assert str(err.value) == (
        f"bundle {bundle_dir} has no program for NPU (it has: CPU, GPU); make one on the machine "
        f"that has the device with: lerobot-runtime lower {bundle_dir} --device NPU"
    )
    assert err.value.__cause__ is None and err.value.__suppress_context__


def test_a_bundle_without_programs_says_none(bundle_dir: Path) -> None:
    bundle = Bundle.open(bundle_dir)
    empty = Bundle(bundle.path, copy.copy(bundle.manifest))
    object.__setattr__(empty.manifest, "programs", {})
    with pytest.raises(DeviceError, match=r"has no program for CPU \(it has: none\)"):
        empty.program("CPU")


def _rewrite_case(bundle_dir: Path, case: bytes) -> None:
    (bundle_dir / "test_case.npz").write_bytes(case)
    manifest = json.loads((bundle_dir / "manifest.json").read_text())
    manifest["test_case"]["sha256"] = _sha(case)
    (bundle_dir / "manifest.json").write_text(json.dumps(manifest))


def test_a_test_case_that_is_not_an_npz_is_refused(bundle_dir: Path) -> None:
    _rewrite_case(bundle_dir, b"not a zip file at all")
    with pytest.raises(BundleError, match=r"test_case.npz: not a readable .npz test case: ") as err:
        Bundle.open(bundle_dir).test_case()
    assert isinstance(err.value.__cause__, (ValueError, OSError))


def test_a_test_case_with_a_pickled_array_is_refused(bundle_dir: Path) -> None:
    buf = io.BytesIO()
    np.savez(buf, **{"input/x": np.array([{"a": 1}], dtype=object)})
    _rewrite_case(bundle_dir, buf.getvalue())
    with pytest.raises(BundleError, match=r"not a readable .npz test case: .*allow_pickle"):
        Bundle.open(bundle_dir).test_case()


@pytest.mark.parametrize(
    ("drop", "message"),
    [
        ("input/observation.state", "test case lacks input 'input/observation.state'"),
        ("input/observation.images.front", "test case lacks input 'input/observation.images.front'"),
        ("output/action", "test case lacks output 'output/action'"),
    ],
)
def test_a_test_case_missing_an_array_names_it(bundle_dir: Path, drop: str, message: str) -> None:
    with np.load(io.BytesIO(_case_bytes())) as npz:
        arrays = {k: npz[k] for k in npz.files if k != drop}
    buf = io.BytesIO()
    np.savez(buf, **arrays)  # type: ignore[arg-type]
    _rewrite_case(bundle_dir, buf.getvalue())
    with pytest.raises(BundleError) as err:
        Bundle.open(bundle_dir).test_case()
    assert str(err.value) == f"{bundle_dir / 'test_case.npz'}: {message}"


def test_arrays_other_than_inputs_and_outputs_are_not_read_as_either(bundle_dir: Path) -> None:
    _rewrite_case(bundle_dir, _case_bytes(**{"notes/x": np.zeros(1), "inputs/y": np.zeros(1)}))
    case = Bundle.open(bundle_dir).test_case()
    assert set(case.inputs) == set(SHAPES)
    assert set(case.outputs) == {"action"}


@pytest.mark.parametrize(
    ("read", "name", "field"),
    [
        (lambda b: b.read_program("CPU"), "program_cpu.pte", "programs.CPU.file"),
        (lambda b: b.map_program("GPU"), "program_gpu.pte", "programs.GPU.file"),
        (lambda b: b.test_case(), "test_case.npz", "test_case.file"),
    ],
)
def test_a_file_removed_after_open_is_refused_when_read_naming_its_field(
    bundle_dir: Path, read: Any, name: str, field: str
) -> None:
    bundle = Bundle.open(bundle_dir)
    (bundle_dir / name).unlink()
    with pytest.raises(BundleFileNotFoundError) as err:
        read(bundle)
    assert str(err.value) == _missing(bundle_dir, field, name)


class _RestoredAfterRead:
    """A file object whose file gets its exported content back once read: what was read is tampered,
    what a second look at the disk would find is not (a file swapped while the bundle loads)."""

    def __init__(self, fh: Any, path: Path, original: bytes) -> None:
        self._fh, self._path, self._original = fh, path, original

    def __enter__(self) -> _RestoredAfterRead:
        return self

    def __exit__(self, *exc: object) -> None:
        self._fh.close()

    def fileno(self) -> int:
        return int(self._fh.fileno())

    def read(self, size: int = -1) -> bytes:
        data = bytes(self._fh.read(size))
        self._restore()
        return data

    def readinto(self, buffer: bytearray) -> int:
        n = int(self._fh.readinto(buffer))
        self._restore()
        return n

    def _restore(self) -> None:
        with open(self._path, "wb") as out:  # the builtin: Path.open is the one patched
            out.write(self._original)


@pytest.mark.parametrize(
    ("read", "name", "field", "original"),
    [
        (lambda b: b.read_program("CPU"), "program_cpu.pte", "programs.CPU", CPU_PROGRAM),
        (lambda b: b.map_program("CPU"), "program_cpu.pte", "programs.CPU", CPU_PROGRAM),
        (lambda b: b.map_program("GPU"), "program_gpu.pte", "programs.GPU", GPU_PROGRAM),
        (lambda b: b.test_case(), "test_case.npz", "test_case", None),
    ],
    ids=["read_program", "map_program CPU", "map_program GPU", "test_case"],
)
def test_the_bytes_checked_are_the_bytes_used(
    bundle_dir: Path, monkeypatch: pytest.MonkeyPatch, read: Any, name: str, field: str, original: bytes | None
) -> None:
    """The digest is taken of the bytes already read, not of the file read a second time."""
    original = original if original is not None else _case_bytes()
    target = bundle_dir / name
    bundle = Bundle.open(bundle_dir)
    tampered = _case_bytes(**{"output/action": np.zeros((10, 6), np.float32)}) if name.endswith(".npz") else None
    target.write_bytes(tampered if tampered is not None else original[:-1] + b"!")
    open_ = Path.open

    def open_then_restore(self: Path, *args: Any, **kwargs: Any) -> Any:
        fh = open_(self, *args, **kwargs)
        return _RestoredAfterRead(fh, self, original) if self == target else fh

    monkeypatch.setattr(Path, "open", open_then_restore)
    with pytest.raises(BundleError) as err:
        read(bundle)
    monkeypatch.undo()
    assert target.read_bytes() == original  # the disk was restored: only the bytes read were wrong
    got = _sha(tampered if tampered is not None else original[:-1] + b"!")
    assert str(err.value) == (
        f"{target}: sha256 {got} does not match the manifest's {field}.sha256 {_sha(original)}; "
        "the file was changed or damaged after export"
    )
