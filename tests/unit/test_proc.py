"""The subprocess seam: one error shape for a missing binary, an OS error, a timeout and a failure."""

from __future__ import annotations

import json
import sys

import pytest

from trainstack import proc
from trainstack.errors import UserError


def test_missing_binary_is_one_user_error():
    with pytest.raises(proc.CommandError) as caught:
        proc.run(["/nonexistent/trainstack-no-such-tool", "version"])
    err = caught.value
    assert isinstance(err, UserError) and err.exit_code == 1
    assert err.missing and err.exit_code_of_command is None
    assert err.argv == ["/nonexistent/trainstack-no-such-tool", "version"]
    assert "\n" not in err.one_line()


def test_non_zero_exit_carries_command_exit_code_and_last_lines():
    script = "import sys\nfor i in range(20): print('line', i)\nprint('error: broken', file=sys.stderr)\nsys.exit(4)"
    with pytest.raises(proc.CommandError) as caught:
        proc.run([sys.executable, "-c", script])
    err = caught.value
    assert err.exit_code_of_command == 4
    assert err.tail.splitlines()[-1] == "error: broken"
    assert len(err.tail.splitlines()) == proc.TAIL_LINES
    assert "broken" in err.one_line()


def test_check_false_returns_the_result():
    result = proc.run([sys.executable, "-c", "import sys; print('out'); sys.exit(2)"], check=False)
    assert result.returncode == 2 and result.stdout == "out\n"


def test_timeout_is_a_command_error():
    with pytest.raises(proc.CommandError) as caught:
        proc.run([sys.executable, "-c", "import time; time.sleep(5)"], timeout=0.2)
    assert caught.value.exit_code_of_command is None and not caught.value.missing


def test_os_error_is_a_command_error(tmp_path):
    not_executable = tmp_path / "tool"
    not_executable.write_text("#!/bin/sh\n")
    with pytest.raises(proc.CommandError) as caught:
        proc.run([str(not_executable)])
    assert not caught.value.missing


def test_start_missing_binary_same_shape():
    with pytest.raises(proc.CommandError) as caught:
        proc.start(["/nonexistent/trainstack-server"])
    assert caught.value.missing


def test_every_command_is_recorded(tmp_path):
    log = tmp_path / "commands.jsonl"
    proc.record_to(log)
    try:
        proc.run([sys.executable, "-c", "pass"])
        proc.run([sys.executable, "-c", "import sys; sys.exit(1)"], check=False)
        with pytest.raises(proc.CommandError):
            proc.run(["/nonexistent/x"])
    finally:
        proc.record_to(None)
    proc.run([sys.executable, "-c", "pass"])  # after recording stops: not written
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert [entry["exit_code"] for entry in lines] == [0, 1, None]
    assert lines[2]["argv"] == ["/nonexistent/x"]
