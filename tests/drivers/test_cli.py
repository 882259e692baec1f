"""The motors and bench bus commands, run through the real CLI entry point against the simulator."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from drivers.arm import open_arm
from drivers.cli import parse_ids
from drivers.config import ArmConfig
from drivers.sim.simulator import ServoSimulator
from runtime.cli import main

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    # main() installs a root handler on the (captured) stderr of the test that ran it.
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_motors_scan_and_read(capsys: pytest.CaptureFixture[str]) -> None:
    with ServoSimulator("dynamixel", [1, 2, 3]) as sim:
        assert main(["motors", "scan", "--port", sim.port, "--protocol", "dynamixel", "--ids", "0-5"]) == 0
        out = capsys.readouterr().out
        assert "xl330-m288" in out and out.count("1200") == 3
        assert main(["motors", "read", "--port", sim.port, "--protocol", "dynamixel", "--ids", "1-3", "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert data["id2"]["raw"] == 2048


def test_motors_read_with_calibration(capsys: pytest.CaptureFixture[str]) -> None:
    cal = REPO / "configs/calibration/so101_sim.toml"
    with ServoSimulator("feetech", range(1, 7)) as sim:
        assert main(["motors", "read", "--port", sim.port, "--calibration", str(cal)]) == 0
    assert "shoulder_pan" in capsys.readouterr().out


def test_bench_bus_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "bus", "--json", "--cycles", "20"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert "no baud rate" in report["note"]
    assert [r["protocol"] for r in report["results"]] == ["feetech", "dynamixel"]
    feetech = report["results"][0]
    # sync read 6 ids (10+6 bytes) + 6 replies of 22 data bytes (28 each) + sync write 6x(1+2) (26 bytes)
    assert feetech["wire_bytes"] == 14 + 6 * 28 + 26


def test_scan_reports_nothing_found(capsys: pytest.CaptureFixture[str]) -> None:
    with ServoSimulator("feetech", [7]) as sim:
        assert main(["motors", "scan", "--port", sim.port, "--ids", "1-3"]) == 1
    assert "no servos answered" in capsys.readouterr().out


def test_parse_ids() -> None:
    assert parse_ids("1-3,7") == [1, 2, 3, 7]
    assert parse_ids("1..2") == [1, 2]
    with pytest.raises(Exception, match="ids"):
        parse_ids("a-b")


def test_open_arm_sim_default_config() -> None:
    with open_arm(ArmConfig(), base_dir=REPO) as bus:
        bus.enable_torque()
        bus.write_goals({"shoulder_pan": 15.0})
        assert bus.read_state()["shoulder_pan"].goal == pytest.approx(15.0, abs=0.1)
