"""The `trainstack` entry point: argument parsing and exit codes only.

Each subcommand lives in its own module under trainstack.commands (its parser and a thin call into
its feature), resolved in one place, commands.COMMANDS. Errors a user can cause arrive as UserError
and leave as one line on stderr with the error's exit code (errors.py: 2 for wrong usage).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback

from . import __version__, cmdline, commands
from .cmdline import Parser
from .errors import INTERNAL_ERROR, UserError


def build_parser(argv: list[str] | None = None, every: bool = False) -> argparse.ArgumentParser:
    """The parser for ARGV: every subcommand listed, only the one ARGV names configured (its module
    imported), so that `trainstack --help` stays cheap; every=True configures all (the whole tree)."""
    parser = Parser(prog="trainstack", description="Kubeflow Trainer as a platform: pinned, rendered, validated, tested.")
    parser.add_argument("--version", action="version", version=f"trainstack {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    commands.build(sub, commands.chosen(sys.argv[1:] if argv is None else argv), every=every)
    return parser


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    args = None
    try:
        args = build_parser(words).parse_args(words)
        return int(args.func(args) or 0)
    except UserError as err:
        print(err.one_line(), file=sys.stderr)
        if cmdline.wants_json(words, args):  # --output json: the failure as data on stdout too
            print(json.dumps({"error": err.as_data()},
                             indent=2))
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
