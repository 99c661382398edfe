"""Where things live: the repository root and the tool/build cache outside it.

The cache defaults to ~/.cache/trainstack and is moved with TRAINSTACK_CACHE, so CI and
users keep built tools across clones and a warm run skips every build.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def repo_root() -> Path:
    """The trainstack checkout: TRAINSTACK_ROOT, else the folder holding the lock file."""
    env = os.environ.get("TRAINSTACK_ROOT")
    if env:
        return Path(env).resolve()
    for candidate in [Path.cwd(), *Path.cwd().parents, PACKAGE_DIR.parent.parent]:
        if (candidate / "trainstack.lock.yaml").is_file():
            return candidate
    return PACKAGE_DIR.parent.parent


def cache_dir() -> Path:
    """Root of the versioned tool and build cache (never inside the repository)."""
    env = os.environ.get("TRAINSTACK_CACHE")
    base = Path(env) if env else Path.home() / ".cache" / "trainstack"
    return base.expanduser().resolve()


@contextlib.contextmanager
def exclusive(name: str) -> Iterator[None]:
    """Hold the cache-wide lock NAME (a file under the cache's locks/) until the block ends: one holder at
    a time across processes (xdist workers, the e2e groups, a command in another shell)."""
    lock_file = cache_dir() / "locks" / f"{name}.lock"
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def lock_path() -> Path:
    return Path(os.environ.get("TRAINSTACK_LOCK", repo_root() / "trainstack.lock.yaml"))


def chart_dir() -> Path:
    return repo_root() / "charts" / "trainstack"


def runtimes_dir(root: Path | None = None) -> Path:
    """The golden runtimes' skeletons: chart files (charts/trainstack/files/runtimes), one per upstream runtime."""
    return (root or repo_root()) / "charts" / "trainstack" / "files" / "runtimes"


def policies_dir(root: Path | None = None) -> Path:
    """The guard rails: one ValidatingAdmissionPolicy per file, chart files (charts/trainstack/files/policies)."""
    return (root or repo_root()) / "charts" / "trainstack" / "files" / "policies"


def overlays_dir() -> Path:
    return repo_root() / "overlays"
