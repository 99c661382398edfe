"""`trainstack generate`: regenerate every generated file."""

from __future__ import annotations

import argparse

from .. import generate, progress


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = "Regenerate every generated file: " + "; ".join(s.writes for s in generate.STEPS)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    for name, seconds in generate.generate():
        progress.info(f"generate: {name} ({seconds:.1f} s)")
    return 0
