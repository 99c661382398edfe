"""`trainstack backup`: clean, restorable manifests of a cluster's TrainJobs, runtimes and teams."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml

from .. import backup, progress
from ..errors import UserError


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out-dir", dest="out", metavar="DIR", help="folder to write (numbered files, restore order); default: standard output")
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: KUBECONFIG, then ~/.kube/config)")
    parser.add_argument("--context", help="kube context (default: the current one)")
    parser.add_argument("-o", "--output", choices=["text", "json"], default="text", help="summary format with --out-dir")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    cluster = backup.Cluster(args.kubeconfig, args.context)
    files = backup.collect(cluster)
    counts: dict[str, int] = {}
    for objs in files.values():
        for o in objs:
            counts[o["kind"]] = counts.get(o["kind"], 0) + 1
    if args.out is None:
        print(yaml.safe_dump_all([o for _, objs in sorted(files.items()) for o in objs], sort_keys=False), end="")
        return 0
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} exists and is not a folder", "pass --out-dir a folder (it is created when missing)",
                        exit_code=2)
    paths = backup.write(files, out)
    if args.output == "json":
        print(json.dumps({"dir": str(out), "files": [str(p) for p in paths], "objects": counts}, indent=2))
    else:
        progress.info(f"backup: {sum(counts.values())} objects ({', '.join(f'{v} {k}' for k, v in sorted(counts.items()))}) "
                      f"in {out}; restore: kubectl apply --server-side -f {out}")
    return 0
