"""`trainstack render --cache-dir DIR`: reuse the render of a byte-identical tree.

Argo CD asks a Config Management Plugin for manifests again whenever its cache key changes, and
that key holds more than the commit: the cluster's API versions too. The platform's first sync
installs CRDs, so the same commit is rendered two or three more times while it syncs, each time
the whole chart (seconds of the repo-server's CPU). A render is a function of the repository's
files, the environment and the Python that prints it (the lock pins helm and kustomize), so the
plugin keys it on exactly those and prints the stored stream when nothing changed.

The key hashes every file below the repository root (path, mode, bytes), `.git` and Python's
byte-code caches aside: any change to any file is a miss, so the cache never needs a list of what
a render reads. Concurrent renders of the same key wait for the first (a file lock) rather than
all rendering; at most `KEEP` entries are kept, the least recently used going first.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import yaml

from . import lock as lockmod

KEEP = 16
# What `render --cache-dir` says on stderr when it printed a stored render (the GitOps e2e counts it
# in the CMP server's log of the plugin's output).
REUSED = "render of this tree reused from"
SKIP_DIRS = {".git", "__pycache__", ".pytest_cache", ".ruff_cache", ".hypothesis", ".venv"}
SUFFIX = ".yaml"


def _files(root: Path) -> Iterator[Path]:
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for name in sorted(files):
            if not name.endswith(".pyc"):
                yield Path(folder) / name


def tree_key(root: Path, env: str) -> str:
    """The render's key: ENV, the Kubernetes release it renders for (TRAINSTACK_KUBERNETES, else the lock's), the
    Python and PyYAML that print it, and every file of the tree."""
    release = os.environ.get(lockmod.KUBERNETES_ENV, "")
    digest = hashlib.sha256(f"env={env}\nkubernetes={release}\npython={sys.version}\npyyaml={yaml.__version__}\n".encode())
    for path in _files(root):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            digest.update(f"L {rel} {os.readlink(path)}\n".encode())
            continue
        data = path.read_bytes()
        digest.update(f"F {rel} {path.stat().st_mode & 0o111:o} {len(data)}\n".encode())
        digest.update(data)
    return digest.hexdigest()


def cached(cache_dir: Path, key: str, render: Callable[[], str]) -> tuple[str, bool]:
    """(the stream, whether it came from the cache): the stored render for KEY, else RENDER()'s,
    stored for next time. A cache folder that cannot be written only means no reuse."""
    lock_path = cache_dir / f"{key}.lock"
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        lock = lock_path.open("w")
    except OSError:
        return render(), False
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second render of the same tree waits for the first
        entry = cache_dir / f"{key}{SUFFIX}"
        try:
            stream = entry.read_text()
            os.utime(entry)
            return stream, True
        except OSError:
            pass
        stream = render()
        tmp = entry.with_name(f".{entry.name}.{os.getpid()}")
        try:
            tmp.write_text(stream)
            tmp.replace(entry)
        except OSError:
            tmp.unlink(missing_ok=True)
        prune(cache_dir)
        return stream, False
    finally:
        lock_path.unlink(missing_ok=True)
        lock.close()


def prune(cache_dir: Path, keep: int = KEEP) -> None:
    entries = sorted(cache_dir.glob(f"*{SUFFIX}"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in entries[keep:]:
        old.unlink(missing_ok=True)
