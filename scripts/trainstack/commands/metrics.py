"""`trainstack metrics [EXPORTER]`: the metric names the pinned components define."""

from __future__ import annotations

import argparse
import json

from .. import monitoring, progress
from ..errors import UserError


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("exporter", nargs="?", choices=[*monitoring.CONTROLLERS, "kube-state-metrics", "blackbox-exporter", monitoring.TRACKING])
    parser.add_argument("-o", "--output", choices=["text", "json"], default="text")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    known = monitoring.known_metrics()
    if args.exporter and args.exporter not in known:
        raise UserError(f"{args.exporter} is not pinned in trainstack.lock.yaml", f"pinned: {', '.join(known)}")
    wanted = [args.exporter] if args.exporter else list(known)
    if args.output == "json":
        print(json.dumps({name: known[name] for name in wanted}, indent=2, sort_keys=True))
        return 0
    rows = [(exporter, metric, origin) for exporter in wanted for metric, origin in sorted(known[exporter].items())]
    progress.table("metrics the pinned exporters define", ["exporter", "metric", "defined in"], rows)
    return 0
