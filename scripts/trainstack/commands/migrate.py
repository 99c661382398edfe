"""`trainstack migrate from-upstream`: take over upstream's kubeflow-trainer release."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from .. import migrate, progress, tools


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
    up.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    tools.require("helm")
    migration = migrate.Migration(args.release, args.namespace, args.env,
                          Path(args.kubeconfig) if args.kubeconfig else None, args.context)
    actions, rendered = migration.plan()
    if args.output == "json":
        print(json.dumps({"release": args.release, "namespace": migration.namespace, "dry_run": args.dry_run,
                          "actions": [asdict(a) for a in actions]}, indent=2))
    else:
        progress.table(f"handover of release {migration.namespace}/{args.release} to trainstack"
                       + (" (dry run: nothing changed)" if args.dry_run else ""),
                       ["step", "target", "why"], [(a.step, a.target, a.why) for a in actions],
                       to_stderr=not args.dry_run)
    if args.dry_run:
        return 0
    migration.execute(actions, rendered)
    progress.info(f"release {args.release} handed over to {migrate.TRAINSTACK_RELEASE}; CRDs and TrainJobs kept")
    return 0
