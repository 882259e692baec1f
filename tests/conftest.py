"""Shared fixtures: real bundles exported once per test session, engines loaded from them."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _restore_affinity() -> Iterator[None]:
    """Loading an engine pins the calling thread; keep one test's pinning from leaking into the next."""
    before = os.sched_getaffinity(0)
    yield
    os.sched_setaffinity(0, before)


@pytest.fixture(autouse=True)
def _no_scheduling_left_behind() -> Iterator[None]:
    """A codec that raises the calling thread to real time (SVT-AV1: SCHED_FIFO 99) must not leave the
    test runner's thread there: every thread started after it would inherit it. Put back and failed."""
    policy, priority = os.sched_getscheduler(0), os.sched_getparam(0).sched_priority
    yield
    after = os.sched_getscheduler(0), os.sched_getparam(0).sched_priority
    if after != (policy, priority):
        from runtime.scheduling import _pthread_setschedparam

        _pthread_setschedparam(policy, priority)
        pytest.fail(f"the test left its thread at scheduling class {after[0]}, priority {after[1]}")


@pytest.fixture(scope="session")
def demo_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built-in demo policy (small ACT-style network) exported for CPU, once per session."""
    from runtime.export.demo import ensure_bundle

    return ensure_bundle("demo", tmp_path_factory.mktemp("bundles"))


@pytest.fixture
def bundle_copy(demo_bundle: Path, tmp_path: Path) -> Path:
    """A private copy of the demo bundle that a test may tamper with."""
    dst = tmp_path / "bundle"
    shutil.copytree(demo_bundle, dst)
    return dst


@pytest.fixture(scope="session")
def demo_engine(demo_bundle: Path) -> Iterator[object]:
    """The demo bundle loaded in the direct OpenVINO engine (parity-checked and warmed up)."""
    from runtime.engine.config import EngineConfig
    from runtime.engine.loader import load_engine

    before = os.sched_getaffinity(0)
    engine = load_engine(EngineConfig(bundle=str(demo_bundle), engine="openvino", warmup_runs=1))
    os.sched_setaffinity(0, before)
    yield engine
    engine.close()
