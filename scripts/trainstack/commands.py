"""Subcommands defined outside cli.py: each module listed here has `register(subparsers)`.

Adding a command is one line here plus its own module, so cli.py stays about parsing only.
"""

from __future__ import annotations

import importlib

MODULES: list[str] = [
    "trainstack.validate.command",
    "trainstack.e2e.command",
    "trainstack.nodecmd",
    "trainstack.bench",
    "trainstack.smoke",
    "trainstack.teams",
    "trainstack.status",
    "trainstack.monitoring",
    "trainstack.release",
    "trainstack.publish",
    "trainstack.convert.command",
    "trainstack.migrate",
    "trainstack.backup",
]


def registrars():
    return [importlib.import_module(name).register for name in MODULES]
