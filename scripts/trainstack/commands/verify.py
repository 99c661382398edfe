"""`trainstack verify`: every generated file is as `trainstack generate` writes it."""

from __future__ import annotations

import argparse

from .. import generate


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--keep", help="copy the regenerated scratch tree to this folder (to diff it yourself)")
    parser.set_defaults(func=generate._cmd_verify)
