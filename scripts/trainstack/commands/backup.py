"""`trainstack backup`: clean, restorable manifests of a cluster's TrainJobs, runtimes and teams."""

from __future__ import annotations

import argparse

from .. import backup


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out-dir", dest="out", metavar="DIR", help="folder to write (numbered files, restore order); default: standard output")
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: KUBECONFIG, then ~/.kube/config)")
    parser.add_argument("--context", help="kube context (default: the current one)")
    parser.add_argument("-o", "--output", choices=["text", "json"], default="text", help="summary format with --out-dir")
    parser.set_defaults(func=backup._cmd)
