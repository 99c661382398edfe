"""`trainstack release check|list|changelog|cut|crds`: the release record."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

import yaml

from .. import paths, progress
from .. import release as releasemod
from .. import render as rendermod
from ..errors import UserError


def configure(parser: argparse.ArgumentParser) -> None:
    rsub = parser.add_subparsers(dest="release_command", required=True)
    check_p = rsub.add_parser("check", help="fail when the chart changed since the last release but its version "
                                            "or the changelog did not")
    check_p.add_argument("-o", "--output", choices=["text", "json"], default="text")
    list_p = rsub.add_parser("list", help="the releases, newest first")
    list_p.add_argument("-o", "--output", choices=["text", "json"], default="text")
    changelog_p = rsub.add_parser("changelog", help="write CHANGELOG.md from releases.yaml")
    changelog_p.add_argument("--check", action="store_true", help="fail when CHANGELOG.md is stale")
    cut_p = rsub.add_parser("cut", help="record the next release as cut from a commit (default HEAD)")
    cut_p.add_argument("--commit", default="HEAD", help="git ref the release is cut from (default HEAD)")
    crds_p = rsub.add_parser("crds", help="the CRDs the chart installs with an environment's values (for the "
                                          "server-side apply before helm upgrade: Helm does not upgrade crds/)")
    crds_p.add_argument("--env", default="dev", help="overlay whose values files decide the optional CRDs (default dev)")
    crds_p.add_argument("-f", "--values", action="append", default=[], help="more values files, as for helm")
    for p in (check_p, list_p, changelog_p, cut_p, crds_p):
        p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    root = paths.repo_root()
    if args.release_command == "changelog":
        stale = releasemod.write_changelog(root, check=args.check)
        if args.check and stale:
            print(f"stale: {root / releasemod.CHANGELOG_FILE} (run 'trainstack release changelog')")
            return 1
        if not args.check:
            progress.info(f"{root / releasemod.CHANGELOG_FILE}: {'written' if stale else 'up to date'}")
        return 0
    if args.release_command == "list":
        releases = releasemod.load(releasemod.releases_path(root))
        if args.output == "json":
            print(json.dumps([asdict(r) for r in releases], indent=2))
        else:
            progress.table("releases", ["version", "date", "commit", "breaking"],
                           [(r.version, r.date or "unreleased", r.commit[:12] or "-", "yes" if r.breaking else "")
                            for r in releases])
        return 0
    if args.release_command == "crds":
        if not (root / "overlays" / args.env / "kustomization.yaml").is_file():
            raise UserError(f"no environment '{args.env}': {root / 'overlays' / args.env} has no kustomization.yaml",
                            exit_code=2)
        values = rendermod.value_args(args.env, root=root) + [a for f in args.values for a in ("-f", f)]
        print(yaml.safe_dump_all(rendermod.rendered_crds(paths.chart_dir(), values), sort_keys=False), end="")
        return 0
    if args.release_command == "cut":
        release = releasemod.cut(root, args.commit)
        progress.info(f"release {release.version} recorded as cut from {release.commit}; commit releases.yaml "
                      f"and CHANGELOG.md, and tag it if you like: git tag v{release.version} {release.commit}")
        return 0
    result = releasemod.check(root)
    if args.output == "json":
        print(json.dumps({**asdict(result), "ok": result.ok}, indent=2))
    else:
        for problem in result.problems:
            print(f"- {problem}")
        if result.ok:
            state = (f"{len(result.changed)} chart file(s) changed since, for {result.chart_version}"
                     if result.changed else "the chart is unchanged since")
            print(f"release check: ok (chart {result.chart_version}; last release {result.last_release} "
                  f"at {result.last_commit[:12]}; {state})")
    return 0 if result.ok else 1
