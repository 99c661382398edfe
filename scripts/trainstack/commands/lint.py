"""`trainstack lint`: ruff, helm lint, the layer contract and mypy."""

from __future__ import annotations

import argparse

from .. import lint


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--check", action="append", choices=lint.CHECKS,
                        help="run only this check (repeatable; default: all)")
    parser.add_argument("-o", "--output", choices=["text", "json"], default="text")
    parser.set_defaults(func=lint._cmd)
