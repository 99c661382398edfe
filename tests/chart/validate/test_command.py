"""`trainstack validate` as users run it: exit codes, stdin, usage errors, --env, --kube-version."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
def cli(*args: str, input_text: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainstack", "validate", *args], capture_output=True, text=True,
                          cwd=ROOT, input=input_text, timeout=300, check=False)


def one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    lines = [ln for ln in result.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.mark.slow
def test_env_renders_and_validates_the_environment(chart_ready):
    result = cli("--env", "dev", "--policies", "-o", "json")
    data = json.loads(result.stdout)
    assert result.returncode in (0, 1), result.stderr
    assert data["summary"]["documents"] > 10
    assert {f["file"] for f in data["findings"]} <= {"<render --env dev>"}
    assert not [f for f in data["findings"] if f["rule"] in ("internal-error", "policy-config")], data["findings"]
    unknown = [f for f in data["findings"] if f["rule"] == "unknown-kind"]
    assert not unknown, unknown


@pytest.mark.slow
def test_unknown_env_is_a_usage_error():
    result = cli("--env", "no-such-env")
    assert result.returncode == 2
    one_line_error(result, "unknown environment 'no-such-env'")
