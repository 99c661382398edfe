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
