"""The trainstack CLI as a user runs it, for every tier: a separate process and its real exit code
(`run_cli`), and what a user error looks like (`assert_one_line_error`).

With TRAINSTACK_RECORD_COMMANDS=PATH each CLI process appends its external commands to PATH
(tests/conftest.py records the test process's own).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

RECORD_COMMANDS = "TRAINSTACK_RECORD_COMMANDS"
# `python -m trainstack`, recording its commands first (only when RECORD_COMMANDS is set)
_RECORDING_MAIN = ("import os, runpy; from pathlib import Path; from trainstack import proc; "
                   f"proc.record_to(Path(os.environ[{RECORD_COMMANDS!r}])); "
                   "runpy.run_module('trainstack', run_name='__main__', alter_sys=True)")



def run_cli(*args: str, env: dict | None = None, cwd: Path | None = None, input_text: str | None = None,
            timeout: float = 900) -> subprocess.CompletedProcess:
    """Run `trainstack ARGS` as a user would (a separate process, real exit code)."""
    environment = dict(os.environ)
    environment.update(env or {})
    main = ["-c", _RECORDING_MAIN] if environment.get(RECORD_COMMANDS) else ["-m", "trainstack"]
    return subprocess.run([sys.executable, *main, *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, env=environment, input=input_text, timeout=timeout)


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    """A user error: non-zero exit, exactly one line on stderr starting 'error:' (after any progress
    lines), no traceback."""
    assert result.returncode != 0, result
    lines = [ln for ln in result.stderr.strip().splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error:")]
    assert len(errors) == 1 and lines[-1] == errors[0], result.stderr
    progress = [ln for ln in lines[:-1] if not ln.startswith(("... ", "  done: ", "OCI chart repositories unreachable"))]
    assert progress == [], result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    for fragment in fragments:
        assert fragment in errors[0], (fragment, errors[0])
