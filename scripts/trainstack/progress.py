"""Progress and tables for people, plain lines for logs and CI.

rich draws spinners and tables on a terminal; when stderr is not a terminal (CI, pipes)
the same calls print one plain line per step, so logs stay readable.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence

from rich.console import Console
from rich.table import Table

console = Console(stderr=True, highlight=False, soft_wrap=True)
stdout = Console(highlight=False, soft_wrap=True)


def info(message: str) -> None:
    console.print(message, markup=False)


@contextlib.contextmanager
def step(message: str, spinner: bool = True) -> Iterator[None]:
    """Show `message` with a spinner while the body runs, then its elapsed time. Without SPINNER (steps that run
    side by side: a terminal shows one spinner at a time) a line when it starts, as on a log."""
    start = time.monotonic()
    if console.is_terminal and spinner:
        with console.status(message):
            yield
    else:
        console.print(f"... {message}", markup=False)
        yield
    console.print(f"  done: {message} ({time.monotonic() - start:.1f}s)", markup=False)


def table(title: str, columns: Sequence[str], rows: Sequence[Sequence[object]], to_stderr: bool = False) -> None:
    out = Table(title=title, title_justify="left")
    for column in columns:
        out.add_column(column)
    for row in rows:
        out.add_row(*[str(cell) for cell in row])
    (console if to_stderr else stdout).print(out)

