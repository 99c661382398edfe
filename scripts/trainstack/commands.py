"""Subcommands defined outside cli.py: each module listed here has `register(subparsers)`.

Adding a command is one line here plus its own module, so cli.py stays about parsing only.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["MODULES", "registrars"]

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
    "trainstack.generate",
    "trainstack.publish",
    "trainstack.convert.command",
    "trainstack.migrate",
    "trainstack.backup",
    "trainstack.lint",
]


def registrars() -> list[Callable[[Any], None]]:
    """Each listed module's `register(subparsers)`, in MODULES order (the order of `trainstack --help`)."""
    return [importlib.import_module(name).register for name in MODULES]
