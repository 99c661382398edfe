"""Subcommands defined outside cli.py: each module listed here has `register(subparsers)`.

Adding a command is one line here plus its own module, so cli.py stays about parsing only.
"""

from __future__ import annotations

import argparse
import importlib

MODULES: list[str] = [
    "trainstack.validate.command",
    "trainstack.e2e.command",
    "trainstack.nodecmd",
    "trainstack.benchmarks.command",
    "trainstack.smoke",
    "trainstack.teams",
    "trainstack.status",
    "trainstack.monitoring",
    "trainstack.release",
    "trainstack.publish",
    "trainstack.convert.command",
    "trainstack.migrate",
    "trainstack.backup",
    "trainstack.lint",
]


def registrars():
    return [importlib.import_module(name).register for name in MODULES]


def group(sub: argparse._SubParsersAction, name: str, help: str) -> argparse._SubParsersAction:
    """`trainstack NAME ...`: a command of subcommands (chosen subcommand in args.NAME_command)."""
    parser = sub.add_parser(name, help=help)
    return parser.add_subparsers(dest=f"{name}_command", required=True, parser_class=type(parser))
