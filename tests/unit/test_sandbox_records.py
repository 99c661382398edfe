"""Which sandboxes count as an earlier run's leftovers, and the cgroup walk, on a scratch tree (no namespaces)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from trainstack.cluster import sandbox as sandboxmod

DEAD = 2**22 + 7  # above the default pid_max: no process has it


@pytest.fixture
def host(tmp_path, monkeypatch):
    """NETNS_DIR, OWNERS_DIR and one cgroup hierarchy under TMP_PATH."""
    netns, owners, cgroups = tmp_path / "netns", tmp_path / "owners", tmp_path / "cgroup"
    for d in (netns, owners, cgroups / "cpu"):
        d.mkdir(parents=True)
    (cgroups / "cpu" / "cgroup.procs").write_text("")
    monkeypatch.setattr(sandboxmod, "NETNS_DIR", netns)
    monkeypatch.setattr(sandboxmod, "OWNERS_DIR", owners)
    monkeypatch.setattr(sandboxmod, "CGROUP_ROOT", cgroups)
    return tmp_path


def _sandbox(host: Path, name: str, owner: int, kept: bool = False) -> None:
    (host / "netns" / f"trainstack-{name}").write_text("")
    record = {"owner_pid": owner, "workdir": "/nonexistent"} | ({"kept": True} if kept else {})
    (host / "owners" / f"trainstack-{name}.json").write_text(json.dumps(record))


def test_a_kept_clusters_sandbox_is_no_leftover_until_e2e_down(host):
    _sandbox(host, "crashed", DEAD)
    _sandbox(host, "kept", DEAD, kept=True)  # `e2e --keep` ended: its process is gone, the cluster is not
    _sandbox(host, "running", os.getppid())  # another run, alive
    assert [b.netns for b in sandboxmod.stale()] == ["trainstack-crashed"]
    assert [b.netns for b in sandboxmod.stale(include_kept=True)] == ["trainstack-crashed", "trainstack-kept"]


def test_keep_marks_the_owner_record(host, tmp_path):
    box = sandboxmod.Sandbox(name="mine", workdir=tmp_path / "work")
    box.workdir.mkdir()
    box.keep()
    record = sandboxmod.owner_record(box.netns)
    assert record["kept"] is True and record["owner_pid"] == os.getpid()


def test_the_cgroup_walk_skips_a_cgroup_that_goes_away_meanwhile(tmp_path, monkeypatch):
    root = tmp_path / "trainstack-x"
    (root / "kubepods" / "pod1" / "c1").mkdir(parents=True)
    (root / "kubepods" / "pod2").mkdir(parents=True)
    assert sandboxmod.cgroup_dirs(tmp_path / "absent") == []
    real = os.scandir

    def vanishing(path):  # pod1's container ends between listing kubepods and reading pod1
        if str(path).endswith("pod1"):
            raise FileNotFoundError(path)
        return real(path)

    monkeypatch.setattr(os, "scandir", vanishing)
    assert sorted(p.relative_to(root).as_posix() for p in sandboxmod.cgroup_dirs(root)) == [
        ".", "kubepods", "kubepods/pod2"]  # pod1 left out, the walk goes on
