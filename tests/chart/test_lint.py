"""`trainstack lint`: the pinned ruff and helm lint pass on the tree, and each reports what it finds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.cli import run_cli
from trainstack import lint
from trainstack import lock as lockmod

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_helm_lint_names_the_values_that_break_the_schema(tmp_path, chart_ready):
    lock = lockmod.load()
    values = tmp_path / "values.yaml"
    values.write_text("dataCache:\n  enabled: sometimes\n")
    check = lint.helm_lint(lock, runs={"broken": [values]})
    assert len(check.problems) == 1 and check.problems[0].startswith("broken: ")
    assert "dataCache" in check.problems[0] and "enabled" in check.problems[0]


@pytest.mark.slow
def test_the_tree_lints_clean(chart_ready):
    result = run_cli("lint", "--output", "json", timeout=600)
    checks = {c["name"]: c for c in json.loads(result.stdout)}
    assert set(checks) == set(lint.CHECKS)
    assert all(c["ok"] for c in checks.values()), {n: c["problems"][:5] for n, c in checks.items()}
    assert result.returncode == 0
