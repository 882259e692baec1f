"""A policy bundle on disk: manifest, programs, test case and portable exported program."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from runtime.bundle.manifest import FileEntry, Manifest, ProgramEntry, read_manifest
from runtime.errors import BundleError, BundleFileNotFoundError, DeviceError


def sha256_bytes(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@dataclass(frozen=True)
class TestCase:
    __test__ = False  # a bundle test case, not a pytest class
    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]
    tolerance: dict[str, float]
    scale: dict[str, tuple[float, ...]] = field(default_factory=dict)
    scale_source: str = "absolute"
    # what ``outputs`` are: the eager reference, or what the program computed when it was loaded (a
    # program served with allow_parity_failure is held to that by the canary: drift, not the reference)
    baseline: str = "the reference"


@dataclass(frozen=True)
class Bundle:
    path: Path
    manifest: Manifest

    @classmethod
    def open(cls, path: str | Path, *, verify_all: bool = False) -> Bundle:
        """Read and validate the manifest; check every file it names exists.

        With ``verify_all`` every file's sha256 is checked too (``lerobot-runtime check`` does this);
        otherwise only the files actually read are verified, as they are read.
        """
        p = Path(path)
        if not p.is_dir():
            raise BundleError(f"{p}: not a bundle directory (expected a folder with manifest.json)")
        manifest = read_manifest(p)
        bundle = cls(p, manifest)
        entries: list[tuple[str, FileEntry | ProgramEntry]] = [
            (f"programs.{d}.file", e) for d, e in manifest.programs.items()
        ]
        entries.append(("test_case.file", FileEntry(manifest.test_case.file, manifest.test_case.sha256)))
        if manifest.portable_program is not None:
            entries.append(("portable_program.file", manifest.portable_program))
        if manifest.language is not None:
            entries.append(("language.tokenizer.file", manifest.language.tokenizer))
        for where, entry in entries:
            f = bundle.file(entry.file, where)
            if verify_all:
                bundle._verify(f, entry.sha256, where)
        return bundle

    def file(self, name: str, where: str) -> Path:
        if "/" in name or "\\" in name or name in ("", ".", ".."):
            raise BundleError(
                f"{self.path / 'manifest.json'}: field '{where}': expected a file name inside the bundle, got {name!r}"
            )
        f = self.path / name
        if not f.is_file():
            raise BundleFileNotFoundError(
                f"{self.path / 'manifest.json'}: field '{where}' names {name}, which is not in {self.path}"
            )
        return f

    def _verify(self, f: Path, expected: str, where: str, data: bytes | memoryview | None = None) -> None:
        got = sha256_bytes(data) if data is not None else sha256_file(f)
        if got != expected:
            raise BundleError(
                f"{f}: sha256 {got} does not match the manifest's {where.rsplit('.', 1)[0]}.sha256 {expected}; "
                "the file was changed or damaged after export"
            )

    def program(self, device: str) -> ProgramEntry:
        try:
            return self.manifest.programs[device]
        except KeyError:
            have = ", ".join(self.manifest.programs) or "none"
            raise DeviceError(
                f"bundle {self.path} has no program for {device} (it has: {have}); make one on the machine "
                f"that has the device with: lerobot-runtime lower {self.path} --device {device}"
            ) from None

    def read_program(self, device: str) -> bytes:
        """The program's bytes for ``device``, verified against the manifest's sha256."""
        entry = self.program(device)
        f = self.file(entry.file, f"programs.{device}.file")
        data = f.read_bytes()
        self._verify(f, entry.sha256, f"programs.{device}.file", data)
        return data

    def map_program(self, device: str) -> memoryview:
        """The program for ``device`` in private memory, verified against the manifest's sha256.

        Read into a buffer of its own rather than memory-mapped: a mapping exposes the running engine
        to the file changing under it (a rewrite in place serves garbage, a truncation is SIGBUS). The
        buffer is writable, so OpenVINO imports the blob straight out of it without another copy.
        """
        entry = self.program(device)
        f = self.file(entry.file, f"programs.{device}.file")
        with f.open("rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            buffer = bytearray(size)
            got = fh.readinto(buffer)
        view = memoryview(buffer)[:got]
        self._verify(f, entry.sha256, f"programs.{device}.file", view)
        return view

    def tokenizer_file(self) -> Path:
        """The language policy's tokenizer definition, verified against the manifest's sha256."""
        if self.manifest.language is None:
            raise BundleError(f"{self.path}: the policy takes no task (the manifest has no language section)")
        entry = self.manifest.language.tokenizer
        f = self.file(entry.file, "language.tokenizer.file")
        self._verify(f, entry.sha256, "language.tokenizer.file", f.read_bytes())
        return f

    def test_case(self) -> TestCase:
        entry = self.manifest.test_case
        f = self.file(entry.file, "test_case.file")
        data = f.read_bytes()
        self._verify(f, entry.sha256, "test_case.file", data)
        import io

        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as npz:
                arrays = {k: npz[k] for k in npz.files}
        except (ValueError, OSError) as e:
            raise BundleError(f"{f}: not a readable .npz test case: {e}") from e
        inputs = {k.removeprefix("input/"): v for k, v in arrays.items() if k.startswith("input/")}
        outputs = {k.removeprefix("output/"): v for k, v in arrays.items() if k.startswith("output/")}
        for spec in self.manifest.inputs:
            if spec.name not in inputs:
                raise BundleError(f"{f}: test case lacks input 'input/{spec.name}'")
        for spec in self.manifest.outputs:
            if spec.name not in outputs:
                raise BundleError(f"{f}: test case lacks output 'output/{spec.name}'")
        return TestCase(inputs, outputs, dict(entry.tolerance), dict(entry.scale), entry.scale_source)
