"""Reading the command line's parsers back: each option of a (sub)command as one row, for tests that
write out by hand what every option is called, takes, defaults to and says in ``--help``.

Each helper takes the parser a test built (``root``; one per test keeps the option tests quick), or
builds one."""

from __future__ import annotations

import argparse
from typing import Any

from runtime.cli import build_parser

Row = tuple[str, Any, Any, Any, bool, Any, Any]


def parser_of(*path: str, root: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """The parser of ``lerobot-runtime PATH...`` (``parser_of("bench", "serve")``)."""
    parser = root if root is not None else build_parser()
    for name in path:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return parser


def options(*path: str, root: argparse.ArgumentParser | None = None) -> list[Row]:
    """Each option but ``--help``: (flags joined with ``/``, or the positional's dest; default, type, choices,
    required, metavar, help), in the order ``--help`` lists them."""
    rows = []
    for a in parser_of(*path, root=root)._actions:
        if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        rows.append(("/".join(a.option_strings) or a.dest, a.default, a.type, a.choices, a.required, a.metavar, a.help))
    return rows


def actions(*path: str, root: argparse.ArgumentParser | None = None) -> dict[str, str]:
    """The help line of each sub-command of ``PATH``."""
    sub = next(a for a in parser_of(*path, root=root)._actions if isinstance(a, argparse._SubParsersAction))
    return {a.dest: a.help for a in sub._choices_actions}


def defaults(*argv: str, root: argparse.ArgumentParser | None = None) -> dict[str, Any]:
    """What ``lerobot-runtime ARGV`` parses to, without the handler and the global options."""
    args = vars((root if root is not None else build_parser()).parse_args(list(argv)))
    for key in ("func", "log_level"):
        args.pop(key)
    return args


def handler(*argv: str, root: argparse.ArgumentParser | None = None) -> Any:
    """The function ``lerobot-runtime ARGV`` runs."""
    return (root if root is not None else build_parser()).parse_args(list(argv)).func
