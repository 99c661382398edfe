"""`trainstack validate [PATH...]`: manifests validated the way the API server would on create, offline."""

from __future__ import annotations

import argparse

from ..validate import command


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = "Validate Kubernetes manifests the way the API server would on create, offline."
    command.add_arguments(parser)
    parser.set_defaults(func=command._main)
