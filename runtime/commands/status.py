"""``lerobot-runtime status [--json]``: ask the running daemon how it is doing."""

from __future__ import annotations

import argparse
import json
import logging

log = logging.getLogger(__name__)

DEFAULT_CONFIG = "/etc/lerobot-runtime/config.toml"


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = commands.add_parser("status", help="ask the running daemon: policy, engine, CPUs, clients, latency, arm")
    p.add_argument(
        "--config",
        metavar="FILE",
        help=f"the daemon's config, to find its endpoint (default: {DEFAULT_CONFIG} if present, else the defaults)",
    )
    p.add_argument(
        "--connect",
        metavar="ENDPOINT",
        help="the daemon's endpoint, instead of the config's (e.g. ipc:///run/lerobot-runtime/policy.sock)",
    )
    p.add_argument("--timeout-s", type=float, default=3.0, help="how long to wait for the daemon (default 3)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_status)


def _status(args: argparse.Namespace) -> int:
    from pathlib import Path

    from runtime.client import PolicyClient
    from runtime.config import load_config
    from runtime.protocol.errors import ServerError
    from runtime.status import format_status, gather, status_endpoint

    endpoint = args.connect
    if not endpoint:
        path = args.config or (DEFAULT_CONFIG if Path(DEFAULT_CONFIG).is_file() else None)
        endpoint = status_endpoint(load_config(path))
    try:
        with PolicyClient(endpoint, timeout_s=args.timeout_s) as client:
            info, stats = client.hello(), client.stats()
    except (TimeoutError, ServerError, OSError) as e:
        log.error(
            "no daemon answers at %s (%s): is it running (systemctl status lerobot-runtime), and may this "
            "user connect (members of the lerobot group may)?",
            endpoint,
            e,
        )
        return 2
    s = gather(info, stats)
    s["endpoint"] = endpoint
    print(json.dumps(s, indent=2) if args.json else format_status(s))
    return 0
