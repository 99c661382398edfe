"""Argument parsing every command shares: the parser that turns wrong usage into one line and exit 2,
and `group` for a command of subcommands.

In the core layer so that a feature registering its own subcommands (release, teams, ...) needs
nothing from the cli layer above it.
"""

from __future__ import annotations

import argparse
from typing import NoReturn

from .errors import UsageError


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are a UsageError (one line on stderr, exit 2), not argparse's exit."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, f"see '{self.prog} --help'")


def group(sub: argparse._SubParsersAction, name: str, help: str) -> argparse._SubParsersAction:
    """`trainstack NAME ...`: a command of subcommands (chosen subcommand in args.NAME_command)."""
    parser = sub.add_parser(name, help=help)
    subparsers: argparse._SubParsersAction = parser.add_subparsers(dest=f"{name}_command", required=True,
                                                                   parser_class=type(parser))
    return subparsers
