"""`trainstack lint`: ruff, helm lint, the layer contract and mypy."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from .. import lint


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--check", action="append", choices=lint.CHECKS,
                        help="run only this check (repeatable; default: all)")
    parser.add_argument("-o", "--output", choices=["text", "json"], default="text")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    checks = lint.run(only=args.check)
    if args.output == "json":
        print(json.dumps([asdict(c) | {"ok": c.ok} for c in checks], indent=2))
    else:
        for check in checks:
            status = f"skipped: {check.skipped}" if check.skipped else (
                "ok" if check.ok else f"{len(check.problems)} problem(s)")
            print(f"{check.name}: {status}")
            for problem in check.problems:
                print(f"  {problem}")
    return 0 if all(c.ok for c in checks) else 1
