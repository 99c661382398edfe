"""The parser every command shares: wrong usage becomes one line and exit 2 (a UsageError) that
names the help of the (sub)command used wrongly, not argparse's usage text and exit."""

from __future__ import annotations

import argparse
from typing import NoReturn

from .errors import UsageError


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are a UsageError (one line on stderr, exit 2), not argparse's exit."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, f"see '{self.prog} --help'")
