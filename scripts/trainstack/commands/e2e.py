"""`trainstack e2e [run|down]`: the smoke suite on a real control plane."""

from __future__ import annotations

import argparse

from ..e2e import command as e2e
from ..e2e.providers import PROVIDERS


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "e2e_command",
        nargs="?",
        choices=["run", "down"],
        default="run",
        help="run (default) the suite, or down: stop a cluster kept with --keep and remove what a killed run left "
        "(every provider's, or --provider kind's only)",
    )
    parser.add_argument(
        "--provider",
        choices=PROVIDERS,
        default=None,
        help="local (default): local processes and fake nodes; kind; existing: the current "
        "context; auto: kind when Docker and the images are there, else local",
    )
    parser.add_argument("--env", default="dev", help="overlay whose values files are installed (default dev)")
    parser.add_argument(
        "--data-cache",
        action="store_true",
        help="also install the LWS data cache (dataCache.enabled, for the smoke namespace) and run its runtime",
    )
    parser.add_argument("--keep", action="store_true", help="keep the cluster; 'trainstack e2e down' removes it")
    parser.add_argument("--install", action="store_true", help="existing provider: install (and uninstall) the chart")
    parser.add_argument("--context", help="existing provider: kube context (default: the current one)")
    parser.add_argument(
        "--nodes",
        choices=("real", "kwok", "both"),
        default=None,
        help="local provider: real (a kubelet + containerd node only), kwok (fake nodes only) or both "
        "(default: both when the real-node parts are built, else kwok)",
    )
    parser.add_argument(
        "--real-nodes",
        type=_real_node_count,
        default=None,
        metavar="N",
        help="local provider: how many real nodes (kubelet + containerd each, in namespaces of their own; "
        "default 2)",
    )
    parser.add_argument(
        "--no-tracking",
        action="store_true",
        help="local provider with real nodes: leave out the MLflow tracking server the smoke suite installs "
        "(tracking.enabled) and its check",
    )
    parser.add_argument(
        "--port-base",
        type=int,
        default=None,
        help="local provider: fixed 127.0.0.1 ports from this number up (default: free random ports)",
    )
    parser.add_argument(
        "--upgrade-from",
        metavar="VERSION|REF",
        help="instead of the smoke suite: install the chart of this release (releases.yaml) or git ref, start "
        "TrainJobs, upgrade to the working tree (CRDs server-side, then helm upgrade), check nothing is lost, "
        "roll back; once per --helm binary",
    )
    parser.add_argument(
        "--kube-upgrade-to",
        metavar="RELEASE",
        help="instead of the smoke suite: install the platform and run TrainJobs on the lock's Kubernetes "
        "release, then upgrade the control plane to RELEASE (a newer tested one, X.Y or vX.Y.Z) process by "
        "process on the same etcd, and check the platform and its TrainJobs on it (KWOK nodes)",
    )
    parser.add_argument(
        "--helm",
        nargs="+",
        choices=("helm", "helm3"),
        default=["helm", "helm3"],
        help="with --upgrade-from: the pinned helm lines to upgrade with, in turn (default: helm (v4) then helm3)",
    )
    parser.add_argument(
        "--gitops",
        action="store_true",
        help="instead of helm install: the real Argo CD (make setup-gitops) syncs the platform from a git "
        "repository of this checkout onto the local cluster's real node (e2e/gitops.py)",
    )
    parser.set_defaults(func=e2e.run)


def _real_node_count(text: str) -> int:
    """--real-nodes: 1 to 8 (each node's namespace takes an address 10.250.0.1x and a pod /24)."""
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--real-nodes takes a whole number, not {text!r}") from None
    if not 1 <= count <= 8:
        raise argparse.ArgumentTypeError(f"--real-nodes takes 1 to 8, not {count}")
    return count
