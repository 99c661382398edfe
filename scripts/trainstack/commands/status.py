"""`trainstack status`: the platform at a glance."""

from __future__ import annotations

import argparse
import os

from .. import api, status


def configure(parser: argparse.ArgumentParser) -> None:
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", help="TrainJobs of this namespace (default: the context's, else all)")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="TrainJobs of every namespace")
    parser.add_argument("--platform-namespace", default=api.NAMESPACE, help="where the controllers run")
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: KUBECONFIG, then ~/.kube/config)")
    parser.add_argument("--context", help="kube context (default: the current one)")
    parser.add_argument("--stuck-after", type=int, default=status.UNSCHEDULABLE_AFTER_S, metavar="SECONDS",
                        help="flag a TrainJob whose pod has been unschedulable this long (default 300); pods whose "
                             "containers cannot start (no command, image pull errors) are flagged at once")
    parser.add_argument("--runs", action="store_true",
                        help=f"each TrainJob's MLflow run (the chart's tracking), read from the head of its rank-0 "
                             f"log while its pods exist (the {status.RUNS_LIMIT} newest TrainJobs; needs get on pods/log)")
    parser.add_argument("--tracking-url", default=os.environ.get("MLFLOW_TRACKING_URI", ""), metavar="URL",
                        help="with --runs: link each run under this MLflow address (default: MLFLOW_TRACKING_URI)")
    parser.add_argument("-o", "--output", choices=["text", "json"], default="text")
    parser.set_defaults(func=status._cmd_status)
