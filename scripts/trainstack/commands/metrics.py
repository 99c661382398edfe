"""`trainstack metrics [EXPORTER]`: the metric names the pinned components define."""

from __future__ import annotations

import argparse

from .. import monitoring


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("exporter", nargs="?", choices=[*monitoring.CONTROLLERS, "kube-state-metrics", "blackbox-exporter", monitoring.TRACKING])
    parser.add_argument("-o", "--output", choices=["text", "json"], default="text")
    parser.set_defaults(func=monitoring._cmd_metrics)
