"""`trainstack tools install|list`: the pinned CLIs."""

from __future__ import annotations

import argparse
import json

from .. import lock, progress, tools
from ..errors import UsageError


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="tools_command", required=True)
    install_p = sub.add_parser("install", help="build missing tools into the cache (idempotent)")
    install_p.add_argument("names", nargs="*", help="tools to install (default: all in the lock but those of a setup tier, e.g. argocd: make setup-gitops)")
    install_p.add_argument("--skip-optional", action="store_true", help="skip the upstream controllers (e2e only)")
    install_p.add_argument("--tier", help="only the tools of this setup tier: chart (helm, kustomize: render, validate, docs), "
                           "bench (kubectl-validate) or gitops (Argo CD)")
    install_p.add_argument("--jobs", type=int, metavar="N",
                           help="build up to N tools at once (default 2; 1: one after another)")
    list_p = sub.add_parser("list", help="tool, pinned version, path, status")
    list_p.add_argument("-o", "--output", choices=["text", "json"], default="text")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.tools_command == "list":
        rows = tools.status()
        if args.output == "json":
            print(json.dumps([row.__dict__ for row in rows], indent=2))
        else:
            progress.table("pinned tools", ["tool", "binary", "version", "path", "status"],
                           [(r.tool, r.binary, r.version, r.path, r.status) for r in rows])
        return 0
    if args.names and args.tier:
        raise UsageError("give tool names or --tier, not both", "see 'trainstack tools install --help'")
    known = sorted({t.tier for t in lock.load().tools()} - {""})
    if args.tier and args.tier not in known:
        raise UsageError(f"--tier {args.tier}: no such tier (tiers: {', '.join(known)})",
                         "see trainstack.lock.yaml, tools.*.tier")
    if args.jobs is not None and args.jobs < 1:
        raise UsageError(f"--jobs {args.jobs}: give 1 or more", "see 'trainstack tools install --help'")
    installed = tools.install(args.names or None, include_optional=not args.skip_optional, tier=args.tier,
                              jobs=args.jobs or tools.BUILD_JOBS)
    if all(action == "up to date" for _, _, action, _ in installed):
        progress.info(f"all {len(installed)} pinned tools are up to date; nothing to do")
    progress.table("trainstack tools install", ["tool", "version", "action", "seconds"],
                   [(n, v, a, f"{s:.1f}") for n, v, a, s in installed], to_stderr=True)
    return 0
