"""`trainstack team add`: onboard a team."""

from __future__ import annotations

import argparse

from .. import teams


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="team_command", required=True)
    add_p = sub.add_parser("add", help="add a team (namespace, quota, roles, Kueue queue) to ENV's values file",
                           description="Writes teams.NAME into overlays/ENV/values.yaml, keeping the file's comments "
                                       "and order, after the chart has rendered it. Members: alice, user:alice, "
                                       "group:NAME, sa:NAMESPACE/NAME (comma-separated or repeated).")
    add_p.add_argument("name", help="team name (a DNS label; also its namespace and Kueue queue)")
    add_p.add_argument("--env", default="dev", help="overlay under overlays/ (default dev)")
    add_p.add_argument("--values", help=argparse.SUPPRESS)  # another values file (tests)
    add_p.add_argument("--members", action="append", help="members with the edit role")
    add_p.add_argument("--admins", action="append", help="members with the admin role")
    add_p.add_argument("--viewers", action="append", help="members with the view role")
    add_p.add_argument("--gpus", type=int, help="GPU quota (nvidia.com/gpu unless --gpu-resource)")
    add_p.add_argument("--cpus", help="CPU quota, a quantity (e.g. 32 or 500m)")
    add_p.add_argument("--memory", help="memory quota, a quantity (e.g. 128Gi)")
    add_p.add_argument("--gpu-resource", default="nvidia.com/gpu", help="extended resource of --gpus")
    add_p.add_argument("--borrow-gpus", type=int, help="GPUs it may borrow from idle teams (Kueue)")
    add_p.add_argument("--namespace", help="namespace (default: the team name)")
    add_p.add_argument("--runtimes", action="append", help="golden runtimes it may use (default: all)")
    add_p.add_argument("--own-runtimes", action="store_true", help="may define its own TrainingRuntimes")
    add_p.add_argument("-o", "--output", choices=["text", "json"], default="text")
    add_p.set_defaults(func=teams._cmd_team)
