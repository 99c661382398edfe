"""The plugin's render cache (`trainstack render --cache-dir`): a key that any change to the tree
changes, and a second render of the same tree, concurrent or later, that does not render again."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from trainstack import rendercache


def tree(root: Path) -> Path:
    (root / "overlays" / "dev").mkdir(parents=True)
    (root / "overlays" / "dev" / "values.yaml").write_text("replicas: 1\n")
    (root / "scripts").mkdir()
    (root / "scripts" / "tool.py").write_text("print('x')\n")
    return root


def test_the_key_changes_with_any_file_and_the_environment(tmp_path):
    root = tree(tmp_path / "repo")
    key = rendercache.tree_key(root, "dev")
    assert rendercache.tree_key(root, "dev") == key
    assert rendercache.tree_key(root, "prod") != key
    values = root / "overlays" / "dev" / "values.yaml"
    values.write_text("replicas: 2\n")
    assert rendercache.tree_key(root, "dev") != key
    values.write_text("replicas: 1\n")
    assert rendercache.tree_key(root, "dev") == key
    (root / "new.yaml").write_text("")
    assert rendercache.tree_key(root, "dev") != key
    (root / "new.yaml").unlink()
    (root / "scripts" / "tool.py").chmod(0o755)  # an executable bit is content too
    assert rendercache.tree_key(root, "dev") != key


def test_git_and_byte_code_do_not_change_the_key(tmp_path):
    root = tree(tmp_path / "repo")
    key = rendercache.tree_key(root, "dev")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / "scripts" / "__pycache__").mkdir()
    (root / "scripts" / "__pycache__" / "tool.cpython-311.pyc").write_bytes(b"\0")
    assert rendercache.tree_key(root, "dev") == key


def test_a_second_render_of_the_same_tree_is_the_stored_one(tmp_path):
    calls = []

    def render() -> str:
        calls.append(1)
        return f"--- # render {len(calls)}\n"

    first, hit = rendercache.cached(tmp_path / "c", "k1", render)
    assert (first, hit) == ("--- # render 1\n", False)
    assert rendercache.cached(tmp_path / "c", "k1", render) == (first, True)
    assert rendercache.cached(tmp_path / "c", "k2", render) == ("--- # render 2\n", False)
    assert len(calls) == 2
    assert not list((tmp_path / "c").glob("*.lock"))


def test_concurrent_renders_of_one_tree_render_once(tmp_path):
    calls = []

    def render() -> str:
        calls.append(1)
        time.sleep(0.3)
        return "--- {}\n"

    results: list[tuple[str, bool]] = []
    threads = [threading.Thread(target=lambda: results.append(rendercache.cached(tmp_path, "k", render)))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert sorted(hit for _, hit in results) == [False, True, True]


def test_an_unwritable_cache_only_means_no_reuse(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert rendercache.cached(blocker / "cache", "k", lambda: "--- {}\n") == ("--- {}\n", False)


def test_old_entries_are_pruned(tmp_path):
    for i in range(rendercache.KEEP + 3):
        rendercache.cached(tmp_path, f"k{i:02d}", lambda: "---\n")
        time.sleep(0.01)
    kept = sorted(p.stem for p in tmp_path.glob("*.yaml"))
    assert len(kept) == rendercache.KEEP and "k00" not in kept and f"k{rendercache.KEEP + 2:02d}" in kept
