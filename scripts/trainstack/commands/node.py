"""`trainstack node prereqs|status`: the local cluster's real node."""

from __future__ import annotations

import argparse

from .. import nodecmd


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="node_command", required=True)
    prereqs = sub.add_parser("prereqs", help="install the pinned Debian packages the real node uses (apt-get)")
    prereqs.add_argument("--check", action="store_true", help="only report what is missing (exit 1 if anything)")
    prereqs.add_argument("-o", "--output", choices=("text", "json"), default="text")
    status = sub.add_parser("status", help="list the real node's pinned parts and whether each is installed")
    status.add_argument("-o", "--output", choices=("text", "json"), default="text")
    parser.set_defaults(func=nodecmd._cmd)
