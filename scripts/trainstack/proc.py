"""The one seam through which trainstack runs another program.

Every external command (helm, kustomize, kubectl, git, go, crane, mmdebstrap, the cluster's
servers) goes through `run` (wait for it) or `start` (a long-running process). Both turn the
three ways a command can fail into one shape, `CommandError` (a UserError: one line for the user,
exit code 1), carrying the command, its exit code and the last lines of its output:

- the binary is missing (exit_code None, `missing` True);
- the OS refused to start it, or it ran past its timeout (exit_code None);
- it exited non-zero and the caller asked for `check` (the default).

`record_to(path)` makes every command from then on append one JSON line to `path` (argv, exit
code, seconds, where it ran): the e2e artifacts keep the list of what a run did.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from .errors import UserError, output_line

DEVNULL = subprocess.DEVNULL
PIPE = subprocess.PIPE
STDOUT = subprocess.STDOUT
CompletedProcess = subprocess.CompletedProcess
Popen = subprocess.Popen
TimeoutExpired = subprocess.TimeoutExpired

TAIL_LINES = 5

_record_lock = threading.Lock()
_record_path: Path | None = None


class CommandError(UserError):
    """A command that could not run or failed: what ran, how it ended, the end of what it said."""

    def __init__(self, argv: Sequence[str], exit_code: int | None, tail: str, reason: str,
                 what: str = "", missing: bool = False, hint: str = "") -> None:
        self.argv = [str(a) for a in argv]
        self.exit_code_of_command = exit_code
        self.tail = tail
        self.missing = missing
        label = what or describe(self.argv)
        message = f"{label} {reason}"
        last = output_line(tail, markers=("error",), empty="") if tail else ""
        if last:
            message += f": {last}"
        super().__init__(message, hint=hint)

    @property
    def command(self) -> str:
        return " ".join(self.argv)


def describe(argv: Sequence[str], words: int = 2) -> str:
    """`helm template`, `git clone`: the program's name and its first words that are not flags."""
    if not argv:
        return "command"
    name = Path(str(argv[0])).name
    rest = [str(a) for a in argv[1:] if not str(a).startswith("-")][:words - 1]
    return " ".join([name, *rest])


def record_to(path: Path | None) -> None:
    """Append a JSON line per command to `path` from now on (None: stop recording)."""
    global _record_path
    with _record_lock:
        _record_path = path
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)


def _record(argv: Sequence[str], exit_code: int | None, seconds: float, cwd: Any) -> None:
    path = _record_path
    if path is None:
        return
    line = json.dumps({"argv": [str(a) for a in argv], "exit_code": exit_code, "seconds": round(seconds, 3),
                       "cwd": str(cwd) if cwd else None, "at": time.time()})
    with _record_lock, open(path, "a", encoding="utf-8") as out:
        out.write(line + "\n")


def _tail(*texts: str | bytes | None, lines: int = TAIL_LINES) -> str:
    joined: list[str] = []
    for text in texts:
        if not text:
            continue
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        joined.extend(ln for ln in text.strip().splitlines() if ln.strip())
    return "\n".join(joined[-lines:])


def run(argv: Sequence[str | os.PathLike[str]], *, check: bool = True, capture: bool = True, text: bool = True,
        timeout: float | None = None, env: Mapping[str, str] | None = None, cwd: str | os.PathLike[str] | None = None,
        input: str | bytes | None = None, stdin: int | IO[Any] | None = None, stdout: int | IO[Any] | None = None,
        stderr: int | IO[Any] | None = None, what: str = "", hint: str = "") -> subprocess.CompletedProcess:
    """Run `argv` to its end. capture=True keeps stdout and stderr on the result (unless stdout/stderr
    name somewhere else). A missing binary, an OS error or a timeout always raise CommandError; a
    non-zero exit raises it when `check` (else the caller reads returncode)."""
    args = [os.fspath(a) for a in argv]
    kwargs: dict[str, Any] = {"text": text, "timeout": timeout, "cwd": cwd,
                              "env": dict(env) if env is not None else None}
    if input is not None:
        kwargs["input"] = input
    elif stdin is not None:
        kwargs["stdin"] = stdin
    kwargs["stdout"] = stdout if stdout is not None else (PIPE if capture else None)
    kwargs["stderr"] = stderr if stderr is not None else (PIPE if capture else None)
    start = time.monotonic()
    try:
        result = subprocess.run(args, **kwargs)
    except FileNotFoundError as err:
        _record(args, None, time.monotonic() - start, cwd)
        missing = err.filename in (args[0], None) or not Path(args[0]).exists()
        if missing:
            raise CommandError(args, None, "", "cannot run: not found", what=what, missing=True,
                               hint=hint or "run 'make setup'") from None
        raise CommandError(args, None, str(err), "cannot run", what=what, hint=hint) from None
    except subprocess.TimeoutExpired as err:
        _record(args, None, time.monotonic() - start, cwd)
        raise CommandError(args, None, _tail(err.stdout, err.stderr), f"timed out after {timeout:g} s",
                           what=what, hint=hint) from None
    except OSError as err:
        _record(args, None, time.monotonic() - start, cwd)
        raise CommandError(args, None, "", f"cannot run: {err.strerror or err}", what=what, hint=hint) from None
    _record(args, result.returncode, time.monotonic() - start, cwd)
    if check and result.returncode != 0:
        raise CommandError(args, result.returncode, _tail(result.stdout, result.stderr),
                           f"failed (exit {result.returncode})", what=what, hint=hint)
    return result


def start(argv: Sequence[str | os.PathLike[str]], *, what: str = "", hint: str = "", **popen: Any) -> subprocess.Popen:
    """Start `argv` without waiting (a server, a forwarder). Same error shape as `run` for a binary
    that is missing or cannot start; the caller owns the process."""
    args = [os.fspath(a) for a in argv]
    try:
        process = subprocess.Popen(args, **popen)
    except FileNotFoundError:
        _record(args, None, 0.0, popen.get("cwd"))
        raise CommandError(args, None, "", "cannot run: not found", what=what, missing=True,
                           hint=hint or "run 'make setup'") from None
    except OSError as err:
        _record(args, None, 0.0, popen.get("cwd"))
        raise CommandError(args, None, "", f"cannot run: {err.strerror or err}", what=what, hint=hint) from None
    _record(args, None, 0.0, popen.get("cwd"))
    return process


def output(argv: Sequence[str | os.PathLike[str]], **kwargs: Any) -> str:
    """stdout of `argv`, which must succeed."""
    stdout: str = run(argv, **kwargs).stdout
    return stdout


def succeeds(argv: Sequence[str | os.PathLike[str]], **kwargs: Any) -> bool:
    """Whether `argv` runs and exits 0 (a probe: a missing binary or an error is just False)."""
    try:
        return run(argv, check=False, **kwargs).returncode == 0
    except CommandError:
        return False
