"""The one exception type for errors a user can cause.

Every failure a user can fix (bad input, a missing tool, an unreachable registry) is raised
as a UserError carrying a one-line message, a hint and an exit code. `cli.main` turns it into
one line on stderr; nothing else prints a traceback.
"""

from __future__ import annotations

# Exit codes: 1 a user error (bad input, a failed check), 2 wrong usage, 3 trainstack itself failed (a bug).
USER_ERROR = 1
USAGE_ERROR = 2
INTERNAL_ERROR = 3


class UserError(Exception):
    """A failure the user can act on: `message` says what is wrong, `hint` what to do."""

    def __init__(self, message: str, hint: str = "", exit_code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.exit_code = exit_code

    def one_line(self) -> str:
        text = f"error: {self.message}"
        if self.hint:
            text += f" ({self.hint})"
        return text.replace("\n", " ")

    def as_data(self) -> dict[str, object]:
        """The error as `--output json` gives it, one shape for every subcommand: {"message", "hint", "exit_code"}."""
        return {"message": self.message, "hint": self.hint, "exit_code": self.exit_code}


class UsageError(UserError):
    """The command itself was used wrongly (unknown flag, missing path): exit code 2."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message, hint, exit_code=2)


def output_line(text: str | None, markers: tuple[str, ...] = ("error",), empty: str = "no output",
                limit: int = 400) -> str:
    """The line of a tool's output that says what went wrong, for a one-line message: the first
    line starting with one of `markers` (case-insensitive; () for none), else the last line; one longer
    than `limit` is cut at a word's end, with " ..." after it."""
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    marked = [ln for ln in lines if markers and ln.lower().startswith(tuple(m.lower() for m in markers))]
    line = (marked[:1] or lines[-1:] or [empty])[0]
    if len(line) <= limit:
        return line
    cut = line[:limit].rsplit(" ", 1)[0]  # at a word's end, and said to be cut
    return f"{cut} ..."
