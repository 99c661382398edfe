"""`trainstack deps [build|lock]`: the umbrella chart's dependencies."""

from __future__ import annotations

import argparse
import json

from .. import deps, lock, paths, progress


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("deps_command", nargs="?", choices=["build", "lock"], default="build",
                        help="build (default) the dependencies, or lock: rewrite Chart.lock offline")
    parser.add_argument("--source", choices=["auto", "oci", "source"], default="auto",
                        help="auto: OCI repositories, else pinned upstream source")
    parser.add_argument("--force", action="store_true", help="rebuild even when up to date with the lock")
    parser.add_argument("--charts-only", action="store_true",
                        help="only what a render needs (the subcharts and crds/): skip fetching the lock's other "
                        "sources ahead of time (the GitOps plugin's init)")
    parser.add_argument("-o", "--output", choices=["text", "json"], default="text")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.deps_command == "lock":
        path = deps.write_chart_lock(paths.chart_dir(), lock.load())
        progress.info(f"wrote {path}")
        return 0
    result = deps.build(source=args.source, force=args.force, sources=not args.charts_only)
    if result.skipped:
        progress.info("chart dependencies are up to date with the lock; nothing to do (--force rebuilds)")
    if args.output == "json":
        print(json.dumps(result.__dict__, indent=2, sort_keys=True))
    else:
        label = "OCI chart repositories" if result.source == "oci" else "pinned upstream source (Go module proxy, checksum-verified)"
        progress.table(f"chart dependencies (source: {label})", ["chart", "archive"],
                       sorted(result.charts.items()))
        print(f"dependency source: {result.source}")
    return 0
