"""The `trainstack` entry point: argument parsing and exit codes only.

Each subcommand lives in its own module; errors a user can cause arrive as UserError and
leave as one line on stderr with the error's exit code (2 for wrong usage).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import traceback
from pathlib import Path

from . import __version__, paths, progress
from .cmdline import Parser
from .errors import INTERNAL_ERROR, UsageError, UserError


def _cmd_tools(args: argparse.Namespace) -> int:
    from . import lock, tools

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


def _cmd_deps(args: argparse.Namespace) -> int:
    from . import deps, lock, paths

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


def _cmd_render(args: argparse.Namespace) -> int:
    from . import render

    if args.values_args:  # helm's -f list for ENV (shell words, relative to the repository)
        files = [str(f.relative_to(paths.repo_root())) for f in render.values_files(args.env)]
        print(" ".join(f"-f {shlex.quote(f)}" for f in files))
        return 0
    objects = render.render_objects(args.env)
    if args.out:
        written = render.write_dir(objects, Path(args.out))
        progress.info(f"wrote {len(written)} objects to {args.out}")
    else:
        sys.stdout.write(render.to_stream(objects))
    return 0


def _cmd_lock(args: argparse.Namespace) -> int:
    from . import deps, lock, locksync, paths

    loaded = lock.load()
    if args.lock_command == "sync":
        problems = loaded.problems()
        if problems:  # never write versions from a lock that is not sound
            raise UserError(problems[0], "fix trainstack.lock.yaml, then run 'trainstack lock sync' again")
        written = locksync.sync(lock=loaded, check=args.check)
        verb = "stale" if args.check else "wrote"
        for rel in written:
            print(f"{verb}: {rel}" + (" (run 'trainstack lock sync')" if args.check else ""))
        if not written:
            print("every version is as the lock pins it")
        return 1 if (args.check and written) else 0
    problems = loaded.problems()
    try:
        problems += [f"{rel} does not carry the lock's versions (run 'trainstack lock sync')"
                     for rel in locksync.sync(lock=loaded, check=True)]
    except UserError as err:
        problems.append(err.message)
    try:
        deps.verify_chart_lock(paths.chart_dir(), loaded)
    except UserError as err:
        problems.append(err.message)
    if args.output == "json":
        print(json.dumps({"lock": str(loaded.path), "problems": problems}, indent=2))
    else:
        for problem in problems:
            print(f"- {problem}")
        if not problems:
            print(f"{loaded.path}: ok")
    return 1 if problems else 0


def _cmd_docs(args: argparse.Namespace) -> int:
    from . import chartdocs

    stale = chartdocs.write(check=args.check)
    if args.check and stale:
        for path in stale:
            print(f"stale: {path} (run 'trainstack docs')")
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="trainstack", description="Kubeflow Trainer as a platform: pinned, rendered, validated, tested.")
    parser.add_argument("--version", action="version", version=f"trainstack {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    tools_p = sub.add_parser("tools", help="install and list the pinned CLIs")
    tools_sub = tools_p.add_subparsers(dest="tools_command", required=True, parser_class=Parser)
    install_p = tools_sub.add_parser("install", help="build missing tools into the cache (idempotent)")
    install_p.add_argument("names", nargs="*", help="tools to install (default: all in the lock but those of a setup tier, e.g. argocd: make setup-gitops)")
    install_p.add_argument("--skip-optional", action="store_true", help="skip the upstream controllers (e2e only)")
    install_p.add_argument("--tier", help="only the tools of this setup tier: chart (helm, kustomize: render, validate, docs), "
                           "bench (kubectl-validate) or gitops (Argo CD)")
    install_p.add_argument("--jobs", type=int, metavar="N",
                           help="build up to N tools at once (default 2; 1: one after another)")
    list_p = tools_sub.add_parser("list", help="tool, pinned version, path, status")
    list_p.add_argument("--output", choices=["text", "json"], default="text")
    tools_p.set_defaults(func=_cmd_tools)

    deps_p = sub.add_parser("deps", help="make the umbrella chart's dependencies available")
    deps_p.add_argument("deps_command", nargs="?", choices=["build", "lock"], default="build",
                        help="build (default) the dependencies, or lock: rewrite Chart.lock offline")
    deps_p.add_argument("--source", choices=["auto", "oci", "source"], default="auto",
                        help="auto: OCI repositories, else pinned upstream source")
    deps_p.add_argument("--force", action="store_true", help="rebuild even when up to date with the lock")
    deps_p.add_argument("--charts-only", action="store_true",
                        help="only what a render needs (the subcharts and crds/): skip fetching the lock's other "
                        "sources ahead of time (the GitOps plugin's init)")
    deps_p.add_argument("--output", choices=["text", "json"], default="text")
    deps_p.set_defaults(func=_cmd_deps)

    render_p = sub.add_parser("render", help="render an environment's manifests")
    render_p.add_argument("--env", required=True, help="overlay name under overlays/ (e.g. dev)")
    render_p.add_argument("-o", "--out", help="write one file per object under this folder")
    render_p.add_argument("--values-args", action="store_true",
                          help="print only helm's -f arguments for ENV's values files, in order "
                          "(helm upgrade ... $(trainstack render --env prod --values-args))")
    render_p.set_defaults(func=_cmd_render)

    lock_p = sub.add_parser("lock", help="check trainstack.lock.yaml")
    lock_p.add_argument("lock_command", choices=["check", "sync"],
                        help="check: the lock is sound and every file carries its versions; sync: write them "
                        "(Chart.yaml, values.yaml image keys, the chart README header, pyproject.toml)")
    lock_p.add_argument("--check", action="store_true", help="sync: write nothing, fail when a file is stale")
    lock_p.add_argument("--output", choices=["text", "json"], default="text")
    lock_p.set_defaults(func=_cmd_lock)

    docs_p = sub.add_parser("docs", help="regenerate generated files: the chart README and values.schema.json, "
                                         "the tables of docs/runtimes.md and docs/guardrails.md")
    docs_p.add_argument("--check", action="store_true", help="fail when a generated file is stale")
    docs_p.set_defaults(func=_cmd_docs)

    for register in _extensions():
        register(sub)
    return parser


def _extensions():
    """Subcommands that live in their own modules (validate, smoke, e2e, bench)."""
    from . import commands

    return commands.registrars()


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return int(args.func(args) or 0)
    except UserError as err:
        print(err.one_line(), file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 - the last line of defence: no traceback for users
        if os.environ.get("TRAINSTACK_DEBUG"):
            traceback.print_exc()
        print(f"error: internal error: {type(err).__name__}: {err} (set TRAINSTACK_DEBUG=1 for details)",
              file=sys.stderr)
        return INTERNAL_ERROR


if __name__ == "__main__":
    sys.exit(main())
