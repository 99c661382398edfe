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
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

# Two stores: the default two real nodes of one cluster. Each holds every image a cluster pulled
# (about 8 GB with torch unpacked); a third concurrent node starts empty.
POOL_SIZE = 2
META_DB = Path("io.containerd.metadata.v1.bolt") / "meta.db"


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


def claim(pool: Path, size: int = POOL_SIZE) -> Claim | None:
    """The first free store of `pool` (`pool/<n>/root`), held until released; None when all are taken."""
    pool.mkdir(parents=True, exist_ok=True)
    for n in range(size):
        handle = (pool / f"{n}.lock").open("wb")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        root = pool / str(n) / "root"
        if _held_by_containerd(root):  # a kept cluster's node, its starting process gone
            handle.close()
            continue
        root.mkdir(parents=True, exist_ok=True)
        return Claim(root, handle, reused=(root / META_DB).is_file())
    return None


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
