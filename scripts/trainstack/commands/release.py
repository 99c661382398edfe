"""`trainstack release check|list|changelog|cut|crds`: the release record."""

from __future__ import annotations

import argparse

from .. import release


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
        p.set_defaults(func=release._cmd)
