"""`trainstack lock check|sync`: trainstack.lock.yaml and the files that carry its versions."""

from __future__ import annotations

import argparse
import json

from .. import deps, locksync, paths
from .. import lock as lockmod
from ..errors import UserError


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("lock_command", choices=["check", "sync"],
                        help="check: the lock is sound and every file carries its versions; sync: write them "
                        "(Chart.yaml, values.yaml image keys, the chart README header, pyproject.toml)")
    parser.add_argument("--check", action="store_true", help="sync: write nothing, fail when a file is stale")
    parser.add_argument("-o", "--output", choices=["text", "json"], default="text")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    loaded = lockmod.load()
    if args.lock_command == "sync":
        problems = loaded.problems()
        if problems:  # never write versions from a lock that is not sound
            raise UserError(problems[0], "fix trainstack.lock.yaml, then run 'trainstack lock sync' again")
        written = locksync.sync(lock=loaded, check=args.check)
        verb = "stale" if args.check else "wrote"
        for rel in written:
            print(f"{verb}: {rel}" + (" (run 'trainstack lock sync')" if args.check else ""))
        if not written:
            print("every version is as the lock pins it")
        return 1 if (args.check and written) else 0
    problems = loaded.problems()
    try:
        problems += [f"{rel} does not carry the lock's versions (run 'trainstack lock sync')"
                     for rel in locksync.sync(lock=loaded, check=True)]
    except UserError as err:
        problems.append(err.message)
    try:
        deps.verify_chart_lock(paths.chart_dir(), loaded)
    except UserError as err:
        problems.append(err.message)
    if args.output == "json":
        print(json.dumps({"lock": str(loaded.path), "problems": problems}, indent=2))
    else:
        for problem in problems:
            print(f"- {problem}")
        if not problems:
            print(f"{loaded.path}: ok")
    return 1 if problems else 0
