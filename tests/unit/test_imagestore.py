"""The real nodes' containerd image stores kept between clusters: who may claim one, how an empty one is
cloned from a populated one, and which images a reused store must drop before the kubelet starts."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

from trainstack.cluster import imagestore

LISTING = """REF TYPE DIGEST SIZE PLATFORMS LABELS
localhost:5000/trainstack/python:bookworm application/vnd.oci.image.manifest.v1+json sha256:aaa 40.0 MiB linux/amd64 io.cri-containerd.image=managed
localhost:5000/trainstack/python@sha256:aaa application/vnd.oci.image.manifest.v1+json sha256:aaa 40.0 MiB linux/amd64 io.cri-containerd.image=managed
sha256:c0ffee application/vnd.oci.image.manifest.v1+json sha256:aaa 40.0 MiB linux/amd64 io.cri-containerd.image=managed
localhost:5000/pause:3.10 application/vnd.oci.image.manifest.v1+json sha256:bbb 300 KiB linux/amd64 io.cri-containerd.image=managed
localhost:5000/gone:v1 application/vnd.oci.image.manifest.v1+json sha256:ccc 1.0 MiB linux/amd64 io.cri-containerd.image=managed
"""


def test_a_rebuilt_tag_drops_every_ref_of_the_old_image_and_a_current_one_stays():
    registry = {"localhost:5000/trainstack/python:bookworm": "sha256:new", "localhost:5000/pause:3.10": "sha256:bbb"}
    stale = imagestore.stale_refs(LISTING, registry.get)
    # python was rebuilt under the same tag: its tag, digest and ID refs go; the tag the registry no
    # longer has goes; pause, unchanged, stays
    assert stale == ["localhost:5000/gone:v1", "localhost:5000/trainstack/python:bookworm",
                     "localhost:5000/trainstack/python@sha256:aaa", "sha256:c0ffee"]


def test_a_store_matching_the_registry_keeps_everything():
    registry = {"localhost:5000/trainstack/python:bookworm": "sha256:aaa", "localhost:5000/pause:3.10": "sha256:bbb",
                "localhost:5000/gone:v1": "sha256:ccc"}
    assert imagestore.stale_refs(LISTING, registry.get) == []


def test_claims_take_distinct_stores_and_none_when_the_pool_is_taken(tmp_path):
    first = imagestore.claim(tmp_path, size=2)
    second = imagestore.claim(tmp_path, size=2)
    assert first and second and first.root != second.root
    assert not first.reused and not second.reused
    assert imagestore.claim(tmp_path, size=2) is None  # both held: the node gets a root in its run directory
    first.release()
    again = imagestore.claim(tmp_path, size=2)
    assert again and again.root == first.root
    again.release()
    second.release()


def test_a_store_whose_database_a_live_containerd_holds_is_skipped(tmp_path):
    """A kept cluster's node: the process that claimed the store is gone, its containerd still runs."""
    db = tmp_path / "0" / "root" / imagestore.META_DB
    db.parent.mkdir(parents=True)
    db.write_bytes(b"")
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, sys, time; f = open(sys.argv[1], 'rb'); fcntl.flock(f, fcntl.LOCK_EX); "
        "print('held', flush=True); time.sleep(60)"), str(db)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout and holder.stdout.readline().strip() == "held"
        got = imagestore.claim(tmp_path, size=2)
        assert got and got.root == tmp_path / "1" / "root"
        got.release()
    finally:
        holder.kill()
        holder.wait()
    # containerd gone: the store is free again, and holds images from before
    got = imagestore.claim(tmp_path, size=2)
    assert got and got.root == tmp_path / "0" / "root" and got.reused
    with open(db, "rb") as probe:  # the probe left no lock behind
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
    got.release()


def populated(root: Path) -> dict[str, Path]:
    """A store as containerd leaves it: its files by role."""
    files = {
        "meta": root / imagestore.META_DB,
        "blob": root / "io.containerd.content.v1.content" / "blobs" / "sha256" / "abc",
        "ingest": root / "io.containerd.content.v1.content" / "ingest" / "x" / "data",
        "snapshots_db": root / "io.containerd.snapshotter.v1.overlayfs" / "metadata.db",
        "layer_file": root / "io.containerd.snapshotter.v1.overlayfs" / "snapshots" / "1" / "fs" / "etc" / "os-release",
        "cri": root / "io.containerd.grpc.v1.cri" / "containers" / "c1" / "status",
    }
    for role, path in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(role)
    home = root / "io.containerd.snapshotter.v1.overlayfs" / "snapshots" / "1" / "fs" / "home" / "mpiuser"
    home.mkdir(parents=True)
    if os.geteuid() == 0:
        os.chown(home, 1000, 1000)
    files["home"] = home
    return files


def test_seed_clones_a_populated_store_sharing_only_its_immutable_parts(tmp_path):
    source = populated(tmp_path / "0" / "root")
    assert imagestore.seed(tmp_path, size=3) == [tmp_path / "1" / "root", tmp_path / "2" / "root"]
    for n in (1, 2):
        clone = {role: tmp_path / str(n) / "root" / path.relative_to(tmp_path / "0" / "root")
                 for role, path in source.items()}
        assert all(clone[r].read_text() == r for r in source if r != "home")
        # content blobs and unpacked layers: the same files (no disk); databases and records: copies of their own
        same = {r for r in source if r != "home" and os.stat(source[r]).st_ino == os.stat(clone[r]).st_ino}
        assert same == {"blob", "layer_file"}
        if os.geteuid() == 0:  # a layer's directories keep their owners (a user's home in the image)
            assert (os.stat(clone["home"]).st_uid, os.stat(clone["home"]).st_gid) == (1000, 1000)
    clone_meta = tmp_path / "1" / "root" / imagestore.META_DB
    clone_meta.write_text("changed by the clone's containerd")
    assert source["meta"].read_text() == "meta"
    assert not (tmp_path / "1" / "root.partial").exists()
    # every store is populated now: nothing more to seed, and a claim gets a store that holds images
    assert imagestore.seed(tmp_path, size=3) == []
    got = imagestore.claim(tmp_path, size=3)
    assert got and got.reused
    got.release()


def test_claim_prefers_a_store_with_images_and_seeding_never_copies_one_in_use(tmp_path):
    populated(tmp_path / "0" / "root")
    first = imagestore.claim(tmp_path, size=2)
    assert first and first.root == tmp_path / "0" / "root" and first.reused  # the populated one first
    assert imagestore.seed(tmp_path, size=2) == []  # store 0 is in use: never copied while a node runs on it
    second = imagestore.claim(tmp_path, size=2)
    assert second and second.root == tmp_path / "1" / "root" and not second.reused
    assert list(second.root.iterdir()) == []
    second.release()
    first.release()
    # both free: a claim prefers the populated store; seeding then fills the empty one
    again = imagestore.claim(tmp_path, size=2)
    assert again and again.root == tmp_path / "0" / "root"
    again.release()
    assert imagestore.seed(tmp_path, size=2) == [tmp_path / "1" / "root"]
