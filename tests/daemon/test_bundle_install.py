"""``bundle install``: verify, parity gate, atomic switch; a reload swaps the running policy only after
the new program passed its gate, and a failing bundle never becomes current."""

from __future__ import annotations

import dataclasses
import io
import shutil
import signal
from pathlib import Path

import numpy as np
import pytest

from runtime.bundle.bundle import Bundle, sha256_bytes
from runtime.bundle.manifest import read_manifest
from runtime.cli import main
from runtime.client import PolicyClient
from tests.daemon.conftest import ServeProcess, write_config


def _variant(demo: Path, into: Path, name: str, break_parity: bool = False) -> Path:
    dst = into / name
    shutil.copytree(demo, dst)
    m = read_manifest(dst)
    m = dataclasses.replace(m, policy_name=name)
    if break_parity:
        case = Bundle(dst, m).test_case()
        outputs = {f"output/{k}": v + 0.5 for k, v in case.outputs.items()}
        buf = io.BytesIO()
        np.savez(buf, **{f"input/{k}": v for k, v in case.inputs.items()}, **outputs)
        (dst / m.test_case.file).write_bytes(buf.getvalue())
        m = dataclasses.replace(m, test_case=dataclasses.replace(m.test_case, sha256=sha256_bytes(buf.getvalue())))
    m.write(dst)
    return dst


def test_install_then_reload_switches_after_the_parity_gate(
    demo_bundle: Path, short_tmp: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundles = tmp_path / "bundles"
    assert main(["bundle", "install", str(demo_bundle), "--dir", str(bundles)]) == 0
    current = bundles / "current"
    name = read_manifest(demo_bundle).policy_name
    assert current.is_symlink() and read_manifest(current).policy_name == name
    config = write_config(
        short_tmp / "c.toml",
        f'[engine]\nbundle = "{current}"\n[server]\nendpoints = ["ipc://{short_tmp}/p.sock"]\n'
        '[arm]\nkind = "none"\n[daemon]\ntick_s = 0.05\nstats_log_interval_s = 0\n',
    )
    serve = ServeProcess(config)
    case = Bundle.open(demo_bundle).test_case()
    try:
        serve.wait_line(f"ready: serving {name}")
        v2 = _variant(demo_bundle, tmp_path, f"{name}_v2")
        capsys.readouterr()
        assert main(["bundle", "install", str(v2), "--dir", str(bundles), "--config", str(config), "--reload"]) == 0
        assert f"(PID {serve.proc.pid})" in capsys.readouterr().out
        serve.wait_line("reload: serving")
        assert serve.output.index("parity ok", serve.output.index("reload (SIGHUP)")) < serve.output.index(
            "reload: serving"
        )
        with PolicyClient(f"ipc://{short_tmp}/p.sock", timeout_s=10) as client:
            assert client.hello().policy_name == f"{name}_v2"
            np.testing.assert_allclose(client.infer(case.inputs).actions, case.outputs["action"], atol=2e-5)

        bad = _variant(demo_bundle, tmp_path, f"{name}_bad", break_parity=True)
        assert main(["bundle", "install", str(bad), "--dir", str(bundles)]) == 65  # EX_DATAERR
        assert read_manifest(current).policy_name == f"{name}_v2"  # the switch never happened
        assert not [p for p in bundles.iterdir() if p.name.startswith((".incoming", f"{name}_bad"))]
        serve.proc.send_signal(signal.SIGTERM)
        assert serve.wait() == 0, serve.output
    finally:
        serve.kill()
