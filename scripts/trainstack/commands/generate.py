"""`trainstack generate`: regenerate every generated file."""

from __future__ import annotations

import argparse

from .. import generate


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = "Regenerate every generated file: " + "; ".join(s.writes for s in generate.STEPS)
    parser.set_defaults(func=generate._cmd_generate)
