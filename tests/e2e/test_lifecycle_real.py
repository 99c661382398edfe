"""Faults on the local cluster's real node (kubelet + containerd in the cluster's namespaces, the
chart's controllers as pods): kubelet restarted while training pods run, then containerd
restarted. Each TrainJob's pod really runs (the CPU torch image, a 40 s step); after the restart
the same pods, with no container restart, end Complete. One real-node cluster for both faults.
"""

from __future__ import annotations

import os
import shutil

import pytest
from trainstack import paths
from trainstack.cluster.local import BINARIES
from trainstack.e2e import suite as suitemod
from trainstack.e2e.faults import real_node_fault
from trainstack.e2e.providers.local import REAL_NODE_TOOLS, LocalProvider

from .conftest import need_binaries, run_first_steps

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def real_platform():
    need_binaries(*BINARIES, *REAL_NODE_TOOLS, "helm")
    run_dir = paths.cache_dir() / "e2e" / f"lcr-{os.getpid()}"  # short: containerd sockets live under it
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    provider = LocalProvider(run_dir, nodes="real")
    suite = suitemod.Suite(provider, "dev", run_dir)
    try:
        yield run_first_steps(suite)
    finally:
        provider.down(keep=False)
        shutil.rmtree(run_dir, ignore_errors=True)


@pytest.mark.parametrize("component", ["kubelet", "containerd"])
def test_node_daemon_restarted_with_training_pods_running(real_platform, component):
    row = real_node_fault(real_platform, component)
    print(f"\n{row.fault}: jobs running {row.running}, jobs lost {row.lost}, "
          f"{row.recover_seconds:.1f}s to Complete; {row.detail}")
    assert row.running == 1 and row.lost == 0, row
    assert "container restarts 0" in row.detail, row.detail
