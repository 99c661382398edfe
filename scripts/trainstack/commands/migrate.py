"""`trainstack migrate from-upstream`: take over upstream's kubeflow-trainer release."""

from __future__ import annotations

import argparse

from .. import migrate


def configure(parser: argparse.ArgumentParser) -> None:
    msub = parser.add_subparsers(dest="migrate_command", required=True)
    up = msub.add_parser("from-upstream", help="take over a kubeflow-trainer release without deleting CRDs or "
                                               "TrainJobs (prints the plan first; --dry-run stops there)")
    up.add_argument("--release", required=True, help="name of the upstream kubeflow-trainer release")
    up.add_argument("--namespace", help="its namespace (default: found with helm list -A)")
    up.add_argument("--env", default="dev", help="overlay whose values trainstack is installed with (default dev)")
    up.add_argument("--kubeconfig", help="kubeconfig (default: kubectl's)")
    up.add_argument("--context", help="kube context (default: the current one)")
    up.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    up.add_argument("-o", "--output", choices=["text", "json"], default="text")
    up.set_defaults(func=migrate._cmd)
