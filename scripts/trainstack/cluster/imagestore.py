"""containerd image stores kept between clusters, so that a warm run pulls nothing it pulled before.

A real node's containerd root (its content store, unpacked snapshots and metadata) normally lives in
the run's directory and goes with it: every cluster pulled and unpacked every image again (the
2.3 GB torch image alone took about 70 s per node). A node now claims one of a few stores under the
cache instead. What the node finds there is what a rebooted machine finds in /var/lib/containerd:
its images, plus the sandboxes and containers of pods that no longer exist, which the kubelet
removes as it does after a reboot (their tasks and network namespaces were under the run's state
directory, gone with it).

Who holds a store: containerd keeps its metadata database flock'ed while it runs (bbolt), and the
process that started the node holds `<n>.lock` for the node's life; a store is free only when both
are. A node finding none free gets a root in its run directory, as before.

Images are tagged, not content-addressed, and a rebuilt image keeps its tag: before the kubelet
starts, every tag in the store whose digest differs from the registry's (or that the registry no
longer has) is removed, so the kubelet pulls the current one.

An empty store is filled from a populated free one by `clone`, not by pulling: hard links for the
content blobs and the unpacked snapshots (containerd never rewrites either in place, it only adds and
unlinks them), real copies of everything else (its bolt databases, CRI's records). A clone takes a few
seconds and no disk; pulling and unpacking took minutes and gigabytes. A cluster `seed`s the pool before
its nodes claim stores: every empty free store is cloned, once, so that clusters started later or at
the same time (make test-e2e's second real-node group beside the first: four real nodes) find their
images too.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from .. import paths, proc, progress
from ..errors import UserError

# Four stores: two clusters of two real nodes at once (make test-e2e's real-node groups). Each
# holds every image a cluster pulled (about 8 GB with torch unpacked), most of it shared by hard links
# with the store it was cloned from; a fifth concurrent node starts empty.
POOL_SIZE = 4
META_DB = Path("io.containerd.metadata.v1.bolt") / "meta.db"
# What a clone hard-links: the content blobs and the overlayfs snapshots, written once and never in place.
SHARED = (Path("io.containerd.content.v1.content") / "blobs",
          Path("io.containerd.snapshotter.v1.overlayfs") / "snapshots")


def pool_dir() -> Path:
    """The real nodes' pool of stores under the cache (the local cluster's nodes claim from it)."""
    return paths.cache_dir() / "node" / "stores"


@dataclass
class Claim:
    """Store `root` held by this process until `release()` (the lock file's descriptor stays open)."""

    root: Path
    handle: IO[bytes]
    reused: bool  # the store held images before this claim

    def release(self) -> None:
        if not self.handle.closed:
            self.handle.close()


def _held_by_containerd(root: Path) -> bool:
    """Whether a running containerd has the store's metadata database open (bbolt flocks it)."""
    try:
        fd = os.open(root / META_DB, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops the probe's lock
    return False


def _try(pool: Path, n: int) -> Claim | None:
    """Store N of POOL if it is free (no process holds it, no containerd has it open), now held."""
    handle = (pool / f"{n}.lock").open("wb")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    root = pool / str(n) / "root"
    if _held_by_containerd(root):  # a kept cluster's node, its starting process gone
        handle.close()
        return None
    root.mkdir(parents=True, exist_ok=True)
    return Claim(root, handle, reused=(root / META_DB).is_file())


@contextmanager
def _free(pool: Path, size: int) -> Iterator[list[Claim]]:
    """Every free store of POOL, each held, under the pool's own lock: claimers in other processes wait
    for it (a clone takes seconds) instead of finding every store taken for that moment."""
    pool.mkdir(parents=True, exist_ok=True)
    with (pool / "pool.lock").open("wb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield [c for c in (_try(pool, n) for n in range(size)) if c is not None]


def _partial(target: Path) -> Path:
    """Where a clone of TARGET is built before it is renamed into place."""
    return target.with_name(target.name + ".partial")


def clone(source: Path, target: Path) -> None:
    """Make TARGET (absent or an empty directory) a store holding SOURCE's images; neither may be in use.

    `cp -a --link` first (ownership and modes kept: snapshot directories belong to the images' users),
    then everything outside SHARED is replaced by a real copy, so that the clone's databases and
    records are its own. Built beside TARGET and renamed into place: an interrupted clone leaves TARGET
    empty, never half-made."""
    partial = _partial(target)
    shutil.rmtree(partial, ignore_errors=True)
    proc.run(["cp", "-a", "--link", str(source), str(partial)], timeout=600, stdin=proc.DEVNULL,
             what=f"cloning image store {source}")
    keep = {partial / s for s in SHARED}
    parents = {k.parent for k in keep}
    for entry in (e for top in [partial, *sorted(parents)] for e in sorted(top.iterdir())):
        if entry in keep or entry in parents:
            continue
        original = source / entry.relative_to(partial)
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
        proc.run(["cp", "-a", str(original), str(entry)], timeout=120, stdin=proc.DEVNULL,
                 what=f"copying {original}")
    shutil.rmtree(target, ignore_errors=True)  # no metadata database: nothing a containerd could use
    partial.rename(target)


def _fill(empty: Claim, sources: list[Claim]) -> None:
    """Clone the first populated store of SOURCES (held) into EMPTY (held, empty)."""
    source = next((c for c in sources if c.reused), None)
    if source is None:
        return
    try:
        clone(source.root, empty.root)
    except (UserError, OSError) as err:  # the node pulls its images instead, as into any empty store
        shutil.rmtree(_partial(empty.root), ignore_errors=True)
        empty.root.mkdir(parents=True, exist_ok=True)
        progress.info(f"  warning: could not clone image store {source.root} into {empty.root}: {err}")
        return
    empty.reused = True


def claim(pool: Path, size: int = POOL_SIZE) -> Claim | None:
    """A free store of `pool` (`pool/<n>/root`), one that holds images if any does, held until released;
    None when all are taken."""
    with _free(pool, size) as free:
        chosen = next((c for c in free if c.reused), free[0] if free else None)
        for other in free:
            if other is not chosen:
                other.release()
        return chosen


def seed(pool: Path, size: int = POOL_SIZE) -> list[Path]:
    """Clone a populated free store into every empty free one; returns the stores filled."""
    filled = []
    with _free(pool, size) as free:
        try:
            for empty in (c for c in free if not c.reused):
                _fill(empty, free)
                if empty.reused:
                    filled.append(empty.root)
        finally:
            for held in free:
                held.release()
    return filled


def stale_refs(listing: str, registry_digest: Callable[[str], str | None]) -> list[str]:
    """The refs of `ctr images ls` output to remove: every ref of an image whose tag the registry no longer
    serves at the same digest (its tag, `name@sha256:` and `sha256:` refs alike)."""
    rows = [line.split() for line in listing.splitlines()[1:] if line.strip()]
    by_ref = {row[0]: row[2] for row in rows if len(row) >= 3}
    stale_digests = set()
    for ref, digest in by_ref.items():
        if "@" in ref or ref.startswith("sha256:"):
            continue
        if registry_digest(ref) != digest:
            stale_digests.add(digest)
    return sorted(ref for ref, digest in by_ref.items() if digest in stale_digests)
