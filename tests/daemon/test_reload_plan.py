"""What a SIGHUP may change in place, what needs a restart, and when the policy is reloaded."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import pytest

from drivers.config import ArmConfig
from runtime.config import DaemonConfig, DaemonSettings
from runtime.control.config import ControlConfig
from runtime.engine.config import EngineConfig
from runtime.metrics import MetricsConfig
from runtime.reload import RESTART_SECTIONS, ReloadPlan, bundle_identity, changed_keys, plan_reload
from runtime.server.config import CurveConfig, ServerConfig
from runtime.teleop.config import TeleopConfig


def test_changed_keys_names_each_differing_field_by_its_dotted_path() -> None:
    old = DaemonConfig()
    new = dataclasses.replace(
        old,
        server=dataclasses.replace(old.server, queue_depth=9, curve=CurveConfig("k", "d")),
        daemon=DaemonSettings(tick_s=0.2),
    )
    assert changed_keys(old, new, "") == [
        "server.queue_depth",
        "server.curve.server_secret_key",
        "server.curve.authorized_keys_dir",
        "daemon.tick_s",
    ]
    assert changed_keys(old.server, new.server, "server") == [
        "server.queue_depth",
        "server.curve.server_secret_key",
        "server.curve.authorized_keys_dir",
    ]
    assert changed_keys(old, old, "") == []
    assert changed_keys(1, 2, "x.y") == ["x.y"]
    assert changed_keys(1, 1, "x.y") == []
    # a dataclass against anything else is one change under its own name
    assert changed_keys(old.daemon, None, "daemon") == ["daemon"]
    assert changed_keys(None, old.daemon, "daemon") == ["daemon"]


def test_nothing_changed_is_nothing_to_reload() -> None:
    plan = plan_reload(DaemonConfig(), DaemonConfig(), "abc", "abc")
    assert plan == ReloadPlan(daemon_keys=[], engine_keys=[], bundle_changed=False, restart_keys=[])
    assert plan.reload_engine is False
    assert plan.describe() == "nothing to reload"


def test_daemon_keys_apply_at_once_and_the_rest_wait_for_a_restart() -> None:
    old = DaemonConfig()
    new = dataclasses.replace(
        old,
        daemon=DaemonSettings(stats_log_interval_s=0.2, arm_poll_s=2.0),
        server=dataclasses.replace(old.server, queue_depth=9),
        arm=dataclasses.replace(old.arm, retries=3),
        control=dataclasses.replace(old.control, rate_hz=15.0),
        metrics=MetricsConfig(port=9100),
        teleop=TeleopConfig(deadman_ms=150.0),
    )
    plan = plan_reload(old, new, "", "")
    assert plan == ReloadPlan(
        daemon_keys=["daemon.stats_log_interval_s", "daemon.arm_poll_s"],
        engine_keys=[],
        bundle_changed=False,
        restart_keys=["server.queue_depth", "arm.retries", "control.rate_hz", "metrics.port"],
    )
    assert plan.reload_engine is False
    assert plan.describe() == (
        "reloading daemon.stats_log_interval_s, daemon.arm_poll_s; "
        "needs a restart (kept as before): server.queue_depth, arm.retries, control.rate_hz, metrics.port"
    )


def test_the_sections_that_need_a_restart() -> None:
    assert RESTART_SECTIONS == ("policy", "server", "arm", "control", "metrics")


def test_an_engine_key_reloads_the_policy() -> None:
    old = DaemonConfig()
    new = dataclasses.replace(old, engine=EngineConfig(bundle="/b", threads=2))
    plan = plan_reload(old, new, "x", "x")
    assert plan.engine_keys == ["engine.bundle", "engine.threads"]
    assert plan.reload_engine is True and plan.bundle_changed is False
    assert plan.describe() == "reloading the policy (engine.bundle, engine.threads)"


def test_a_bundle_changed_on_disk_reloads_the_policy() -> None:
    plan = plan_reload(DaemonConfig(), DaemonConfig(), "old digest", "new digest")
    assert plan.bundle_changed is True and plan.reload_engine is True
    assert plan.describe() == "reloading the policy (bundle changed on disk)"
    plan = plan_reload(
        DaemonConfig(), DaemonConfig(daemon=DaemonSettings(tick_s=0.2), arm=ArmConfig(baud=57600)), "a", "b"
    )
    assert plan.describe() == (
        "reloading daemon.tick_s, the policy (bundle changed on disk); needs a restart (kept as before): arm.baud"
    )


def test_only_a_restart_key_says_so_alone() -> None:
    plan = plan_reload(DaemonConfig(), DaemonConfig(control=ControlConfig(rate_hz=10.0)), "", "")
    assert plan.describe() == "nothing to reload; needs a restart (kept as before): control.rate_hz"
    server = ServerConfig(endpoints=("ipc://other.sock",))
    plan = plan_reload(DaemonConfig(), DaemonConfig(server=server), "", "")
    assert plan.restart_keys == ["server.endpoints"]


def test_bundle_identity_is_the_manifests_digest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manifest = b'{"policy": "pick"}'
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "manifest.json").write_bytes(manifest)
    digest = hashlib.sha256(manifest).hexdigest()
    assert bundle_identity(str(tmp_path / "b")) == digest
    monkeypatch.setenv("HOME", str(tmp_path))
    assert bundle_identity("~/b") == digest
    assert bundle_identity("") == ""  # the built-in bundle
    assert bundle_identity(str(tmp_path / "missing")) == ""
    (tmp_path / "b" / "manifest.json").write_bytes(manifest + b" ")
    assert bundle_identity(str(tmp_path / "b")) != digest
