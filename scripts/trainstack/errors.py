"""The one exception type for errors a user can cause.

Every failure a user can fix (bad input, a missing tool, an unreachable registry) is raised
as a UserError carrying a one-line message, a hint and an exit code. `cli.main` turns it into
one line on stderr; nothing else prints a traceback.
"""

from __future__ import annotations


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


class UsageError(UserError):
    """The command itself was used wrongly (unknown flag, missing path): exit code 2."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message, hint, exit_code=2)
