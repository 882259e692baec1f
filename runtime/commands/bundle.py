"""``lerobot-runtime bundle install``: put a bundle in place on the robot and tell the daemon."""

from __future__ import annotations

import argparse
import logging
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the command line imports this module for --help: no zmq there
    from runtime.config import DaemonConfig

log = logging.getLogger(__name__)


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from runtime.engine.install import DEFAULT_BUNDLES_DIR

    p = commands.add_parser("bundle", help="manage the bundles a daemon serves")
    sub = p.add_subparsers(dest="bundle_command", metavar="ACTION", required=True)
    i = sub.add_parser(
        "install", help="verify a bundle, run its parity gate and switch DIR/current to it atomically"
    )
    i.add_argument("src", metavar="SRC", help="bundle directory to install")
    i.add_argument("--dir", default=DEFAULT_BUNDLES_DIR, help=f"bundle directory (default: {DEFAULT_BUNDLES_DIR})")
    i.add_argument("--link", default="current", help="symlink to switch (default: current)")
    i.add_argument(
        "--config",
        metavar="FILE",
        help="daemon config: its [engine] settings run the parity gate, its endpoints find the daemon",
    )
    i.add_argument("--reload", action="store_true", help="then ask the running daemon to reload (SIGHUP)")
    i.set_defaults(func=_install)


def _install(args: argparse.Namespace) -> int:
    from runtime.config import DaemonConfig, load_config
    from runtime.engine.install import install_bundle

    config = load_config(args.config) if args.config else DaemonConfig()
    done = install_bundle(args.src, args.dir, link=args.link, engine=config.engine)
    print(f"installed {done.path}\n{done.link} -> {done.path.name} (was {done.previous or 'nothing'})")
    print(f"parity: {done.parity}")
    if not args.reload:
        print("the running daemon keeps its program until it reloads: systemctl reload lerobot-runtime")
        return 0
    pid = daemon_pid(config)
    if pid is None:
        log.error("no running daemon found for the endpoints of %s; reload it by hand", args.config or "the defaults")
        return 2
    os.kill(pid, signal.SIGHUP)
    print(f"asked the daemon (PID {pid}) to reload; it switches once the new program passes its parity gate")
    return 0


def daemon_pid(config: DaemonConfig) -> int | None:
    """The PID holding the lock of one of the config's ipc endpoints (see runtime.server.instance)."""
    from runtime.server.endpoints import resolve_endpoint
    from runtime.server.instance import lock_holder

    for ep in config.server.endpoints:
        if ep.startswith("ipc://") and not ep.startswith("ipc://@"):
            pid = lock_holder(Path(resolve_endpoint(ep)[len("ipc://") :] + ".lock"))
            if pid is not None:
                return pid
    return None
