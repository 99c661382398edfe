"""The parser every command shares, and the CLI convention every subcommand follows:

- `-o/--output` is the output format, `text` (default) or `json`, on every subcommand (validate
  adds junit and sarif); with json a failure is data too: `{"error": {...}}` on stdout.
- a folder the command writes is `--out-dir DIR`;
- `--env` names an overlay and defaults to `dev` wherever it is one environment;
- wrong usage is one line and exit 2 (errors.UsageError) naming the help of the (sub)command used
  wrongly, never argparse's usage text; other exit codes as errors.py defines them.

tests/unit/test_cli_convention.py checks it over every subcommand's parser.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any, NoReturn

from .errors import UsageError

OUTPUTS = ("text", "json")
DEFAULT_ENV = "dev"
_LEAF = "_trainstack_prog"  # the Namespace attribute naming the innermost parser that parsed


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are a UsageError (one line on stderr, exit 2), not argparse's exit,
    and whose leftover words are blamed on the innermost subcommand, naming its help."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, f"see '{self.prog} --help'")

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if not hasattr(parsed, _LEAF):  # a subcommand's parser finishes before its parent's
            setattr(parsed, _LEAF, self.prog)
        return parsed, extras

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        parsed, extras = self.parse_known_args(args, namespace)
        prog = getattr(parsed, _LEAF, self.prog)
        delattr(parsed, _LEAF)
        if extras:
            raise UsageError(f"unrecognized arguments: {' '.join(extras)}", f"see '{prog} --help'")
        return parsed


def leaves(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The parsers under PARSER that run a command (those without subcommands of their own)."""
    groups = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not groups:
        return [parser]
    return [leaf for g in groups for child in dict.fromkeys(g.choices.values()) for leaf in leaves(child)]


def add_output(parser: argparse.ArgumentParser) -> None:
    """-o/--output text|json on every command under PARSER that does not define it itself."""
    for leaf in leaves(parser):
        if not any("--output" in a.option_strings for a in leaf._actions):
            leaf.add_argument("-o", "--output", choices=OUTPUTS, default="text",
                              help="text (default) or json: the result, or the error, as one JSON document")


def wants_json(argv: Sequence[str], parsed: Any = None) -> bool:
    """Whether the command line asks for --output json (read from ARGV when it did not parse)."""
    if parsed is not None and hasattr(parsed, "output"):
        return bool(parsed.output == "json")
    words = list(argv)
    for i, word in enumerate(words):
        if word in ("-o", "--output") and words[i + 1:i + 2] == ["json"]:
            return True
        if word in ("-ojson", "--output=json"):
            return True
    return False
