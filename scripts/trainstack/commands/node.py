"""`trainstack node prereqs|status`: the local cluster's real node."""

from __future__ import annotations

import argparse
import json

from .. import lock as lockmod
from .. import nodecmd, progress, tools


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="node_command", required=True)
    prereqs = sub.add_parser("prereqs", help="install the pinned Debian packages the real node uses (apt-get)")
    prereqs.add_argument("--check", action="store_true", help="only report what is missing (exit 1 if anything)")
    prereqs.add_argument("-o", "--output", choices=("text", "json"), default="text")
    status = sub.add_parser("status", help="list the real node's pinned parts and whether each is installed")
    status.add_argument("-o", "--output", choices=("text", "json"), default="text")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    lock = lockmod.load()
    if args.node_command == "prereqs":
        if args.check:
            missing = nodecmd.missing_packages(lock)
            if args.output == "json":
                print(json.dumps({"missing": missing}, indent=2))
            for name, version in missing.items():
                progress.info(f"missing: {name}={version}")
            return 1 if missing else 0
        done = nodecmd.install_prereqs(lock)
        progress.info(f"installed {', '.join(done)}" if done else "the real node's Debian packages are installed; nothing to do")
        return 0
    rows = [("debian", name, version, "installed" if name not in nodecmd.missing_packages(lock) else "missing")
            for name, version in nodecmd.pinned_packages(lock).items()]
    for name in nodecmd.NODE_TOOLS:
        tool = lock.tool(name)
        for binary in tool.packages:
            rows.append(("tool", binary, tool.version, "installed" if tools.find(binary, lock) else "missing"))
    nodes = nodecmd.running_nodes()
    if args.output == "json":
        print(json.dumps({"parts": [dict(zip(("kind", "name", "version", "status"), r, strict=True)) for r in rows],
                          "nodes": nodes}, indent=2))
    else:
        progress.table("real node parts", ["kind", "name", "version", "status"], rows)
        if nodes:
            progress.table("real nodes of local clusters", ["cluster", "node", "address", "pod CIDR", "parts"],
                           [(n["cluster"], n["name"], n["ip"], n["podCIDR"],
                             ", ".join(f"{part} {'up' if up else 'DOWN'}" for part, up in n["parts"].items()))
                            for n in nodes])
    return 0
