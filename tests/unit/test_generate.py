"""trainstack verify's comparison on small git trees (the whole run, renders and all, is tests/chart/test_verify.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from support.cli import assert_one_line_error, run_cli
from trainstack import generate
from trainstack.errors import UserError

GIT_ENV = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_SYSTEM": os.devnull}


def _git_tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True, env={**os.environ, **GIT_ENV})
    subprocess.run(["git", "add", "-A"], cwd=root, check=True, env={**os.environ, **GIT_ENV})
    return root


def test_the_copy_holds_what_git_lists_and_the_built_dependencies(tmp_path: Path) -> None:
    root = _git_tree(tmp_path / "root", {".gitignore": "ignored/\ncharts/trainstack/charts/\n", "a.txt": "a\n",
                                         "ignored/x": "x\n", "charts/trainstack/charts/dep.tgz": "tgz"})
    (root / "new.txt").write_text("untracked, not ignored\n")
    (root / "links").mkdir()
    os.symlink("../a.txt", root / "links" / "a")
    copy = tmp_path / "copy"
    generate.copy_checkout(root, copy)
    assert sorted(generate._tree(copy)) == [".gitignore", "a.txt", "links/a", "new.txt"]
    assert os.readlink(copy / "links" / "a") == "../a.txt"
    assert (copy / "charts/trainstack/charts/dep.tgz").read_text() == "tgz"  # copied: never written through
    assert generate.stale_files(root, copy) == []


def test_changed_new_and_removed_files_are_stale(tmp_path: Path) -> None:
    root = _git_tree(tmp_path / "root", {"a.txt": "a\n", "b.txt": "b\n", "gone.txt": "g\n"})
    copy = tmp_path / "copy"
    generate.copy_checkout(root, copy)
    (copy / "a.txt").write_text("regenerated\n")
    (copy / "made.txt").write_text("a generator wrote it\n")
    (copy / "gone.txt").unlink()
    (copy / "__pycache__").mkdir()
    (copy / "__pycache__" / "x.pyc").write_bytes(b"")
    assert generate.stale_files(root, copy) == ["a.txt", "gone.txt", "made.txt"]


def test_verify_without_the_built_chart_dependencies_is_one_line(tmp_path: Path) -> None:
    root = _git_tree(tmp_path, {"trainstack.lock.yaml": "schemaVersion: 1\n"})
    with pytest.raises(UserError, match="charts/trainstack/charts is missing"):
        generate.verify(root)
    result = run_cli("verify", env={"TRAINSTACK_ROOT": str(root)}, cwd=root, timeout=60)
    assert_one_line_error(result, "the renders need the built chart dependencies")
