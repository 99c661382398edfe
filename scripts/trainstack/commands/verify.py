"""`trainstack verify`: every generated file is as `trainstack generate` writes it."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from .. import generate


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--keep", help="copy the regenerated scratch tree to this folder (to diff it yourself)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    start = time.monotonic()
    stale = generate.verify(keep=Path(args.keep) if args.keep else None)
    for rel in stale:
        print(f"stale: {rel}")
    seconds = time.monotonic() - start
    if stale:
        print(f"verify: {len(stale)} file(s) differ from what 'make generate' writes ({seconds:.0f} s); "
              "run 'make generate' and commit the result", file=sys.stderr)
        return 1
    print(f"verify: every generated file is up to date ({seconds:.0f} s)")
    return 0
