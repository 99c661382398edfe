"""Faults on the local cluster's real node (kubelet + containerd in the cluster's namespaces, the
chart's controllers as pods): kubelet restarted while training pods run, then containerd
restarted. Each TrainJob's pod really runs (the CPU torch image, a 20 s step) and is still running
when the daemon is back; after the restart the same pods, with no container restart, end Complete.
One real-node cluster for both faults.
"""

from __future__ import annotations

import pytest

from trainstack.e2e.faults import real_node_fault

pytestmark = pytest.mark.e2e
REAL_NODE_GROUP = 2  # real nodes on clusters of its own, beside the first group (tests/e2e/conftest.py)


# real_platform: the session's real-node platform (tests/support/clusters.py), shared with test_real_platform.py: the
# node daemons come back and the cluster stays as it was (no teardown, nothing cluster-wide changed)


@pytest.mark.parametrize("component", ["kubelet", "containerd"])
def test_node_daemon_restarted_with_training_pods_running(real_platform, component):
    row = real_node_fault(real_platform, component)
    print(f"\n{row.fault}: jobs running {row.running}, jobs lost {row.lost}, "
          f"{row.recover_seconds:.1f}s to Complete; {row.detail}")
    assert row.running == 1 and row.lost == 0, row
    assert row.data["same_pods"] and row.data["container_restarts"] == 0, row.data
    assert row.data["outlived"], row.data  # the containers ran on after the daemon came back

