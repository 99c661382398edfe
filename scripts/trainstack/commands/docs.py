"""`trainstack docs`: the generated chart README, values.schema.json and README tables."""

from __future__ import annotations

import argparse

from .. import chartdocs


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--check", action="store_true", help="fail when a generated file is stale")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    stale = chartdocs.write(check=args.check)
    if args.check and stale:
        for path in stale:
            print(f"stale: {path} (run 'trainstack docs')")
        return 1
    return 0
