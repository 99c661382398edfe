"""Every `trainstack` subcommand: its name, its one-line help and the module under trainstack.commands
that holds its parser (`configure(parser)`) and the thin call into the feature (`parser.set_defaults(func=...)`).

This table is the one place the subcommands are resolved, lazily: `trainstack --help` reads only the
table, and a command line imports only the module of the subcommand it names (and through it its
feature). `build(parser)` with every=True configures them all (the CLI convention test walks that tree).
Adding a command is one row here plus its module.
"""

from __future__ import annotations

import argparse
import importlib

from .. import cmdline

__all__ = ["COMMANDS", "build", "chosen"]

# name: (module under trainstack.commands, help); in the order of `trainstack --help`
COMMANDS: dict[str, tuple[str, str]] = {
    "tools": ("tools", "install and list the pinned CLIs"),
    "deps": ("deps", "make the umbrella chart's dependencies available"),
    "render": ("render", "render an environment's manifests"),
    "lock": ("lock", "check trainstack.lock.yaml"),
    "docs": ("docs", "regenerate generated files: the chart README and values.schema.json, the README tables"),
    "validate": ("validate", "validate manifests: schemas, CRD CEL rules, formats, admission policies (offline)"),
    "e2e": ("e2e", "smoke TrainJobs end to end on a real control plane"),
    "node": ("node", "the local cluster's real node: host packages and pinned parts"),
    "bench": ("bench", "benchmarks; results in bench/results/<part>.json"),
    "smoke": ("smoke", "real torch DDP training smoke (two torchrun nodes on this machine)"),
    "team": ("team", "onboard teams: one reviewed change to an environment's values"),
    "status": ("status", "the platform at a glance: components, runtimes, TrainJobs"),
    "metrics": ("metrics", "metric names the pinned controllers, kube-state-metrics and the tracking server define"),
    "release": ("release", "the release record: check it, list it, write CHANGELOG.md, cut"),
    "generate": ("generate", "regenerate every generated file (make generate)"),
    "verify": ("verify", ("regenerate every generated file in a scratch copy of the checkout and fail naming each "
                         "one that differs from the working tree (make verify)")),
    "chart": ("chart", "the umbrella chart as an artifact"),
    "convert": ("convert", ("Training Operator v1 jobs (PyTorchJob, MPIJob, XGBoostJob, JAXJob, PaddleJob) to "
                           "TrainJobs on the golden runtimes")),
    "migrate": ("migrate", "hand a cluster over to trainstack (from upstream's kubeflow-trainer chart)"),
    "backup": ("backup", "clean manifests of every TrainJob, runtime and team object (restorable)"),
    "lint": ("lint", "ruff, helm lint --strict, the layer contract and mypy (all pinned)"),
}


def chosen(argv: list[str]) -> str | None:
    """The subcommand ARGV names (its first word that is one), or None (--help, --version, a typo)."""
    for word in argv:
        if word in COMMANDS:
            return word
        if not word.startswith("-"):
            return None
    return None


def build(sub: argparse._SubParsersAction, only: str | None, every: bool = False) -> None:
    """Add every subcommand to SUB; configure (import) only ONLY's module, or all of them with EVERY."""
    for name, (module, help) in COMMANDS.items():
        parser = sub.add_parser(name, help=help)
        if every or name == only:
            importlib.import_module(f"{__name__}.{module}").configure(parser)
            cmdline.add_output(parser)  # the convention: -o/--output text|json on every command
