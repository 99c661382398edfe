"""`trainstack lint`: the pinned ruff and helm lint pass on the tree, and each reports what it finds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trainstack import lint
from trainstack import lock as lockmod

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("package", ["ruff", "import-linter", "mypy"])
def test_each_linter_is_the_locks_exact_version(package):
    from importlib import metadata

    pinned = lockmod.load().get("python", "test", package)
    assert pinned.startswith("==") and metadata.version(package) == pinned[2:]


def test_ruff_reports_each_finding_with_file_and_line(tmp_path):
    bad = tmp_path / "pkg"
    bad.mkdir()
    (bad / "mod.py").write_text("import os\n\n\ndef f(x=[]):\n    return x\n")
    check = lint.ruff_check(lockmod.load(), trees=("pkg",), root=tmp_path)
    assert not check.ok
    assert any(p.startswith("pkg/mod.py:1:") and "F401" in p for p in check.problems), check.problems
    assert any(p.startswith("pkg/mod.py:4:") and "B006" in p for p in check.problems), check.problems


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
    result = subprocess.run([sys.executable, "-m", "trainstack", "lint", "--output", "json"], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    checks = {c["name"]: c for c in json.loads(result.stdout)}
    assert set(checks) == set(lint.CHECKS)
    assert all(c["ok"] for c in checks.values()), {n: c["problems"][:5] for n, c in checks.items()}
    assert result.returncode == 0
