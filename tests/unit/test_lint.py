"""`trainstack lint`: the pinned ruff and helm lint pass on the tree, and each reports what it finds."""

from __future__ import annotations

from importlib import metadata

import pytest

from trainstack import lint
from trainstack import lock as lockmod


@pytest.mark.parametrize("package", ["ruff", "import-linter", "mypy"])
def test_each_linter_is_the_locks_exact_version(package):
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


def _tree(root, files):
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_a_dated_figure_in_a_comment_docstring_or_make_help_fails(tmp_path):
    root = _tree(tmp_path, {
        "scripts/pkg/mod.py": ('"""Fast now: 30.9 s to stop, 3.1 s since 2026-12-06."""\n\n'
                               "X = 1  # a third worker fills the waits\n"
                               "# (on 2 cores, 6 December 2026: 142 s with three, 164 with two)\n"),
        "tests/test_x.py": "def test_x():\n    \"\"\"It took 17.0 to 18.6 minutes on 6 and 7 December.\"\"\"\n",
        "Makefile": "setup: ## builds Argo CD (a cold build of 4.7 min here, December 6, 2026)\n\ttrue\n",
    })
    check = lint.dated_figures(root)
    assert not check.ok
    where = sorted(p.split(": ", 1)[0] for p in check.problems)
    assert where == ["Makefile:1", "scripts/pkg/mod.py:1", "scripts/pkg/mod.py:4", "tests/test_x.py:2"], check.problems


def test_rules_records_and_data_pass_the_dated_figure_check(tmp_path):
    root = _tree(tmp_path, {
        "scripts/pkg/mod.py": ('"""Three workers fill the waits: see bench/results/tests.json."""\n\n'
                               'NOW = "2026-12-01T10:00:00Z"  # a timestamp in data, not a comment\n'
                               "WAIT = 30  # seconds: the grace period the kubelet gives (30 s)\n"
                               "\n"
                               "# Observed on 1.36.3 (2026-12-02): the pods did not name the PodGroup.\n"),
        "Makefile": "# The venv is installed by uv: see docs/decisions.md.\nverify: ## regenerate every generated file\n\ttrue\n",
    })
    check = lint.dated_figures(root)
    assert check.ok, check.problems
