"""A real node lost mid-training (tests/e2e: real nodes). The fault cuts real-1's link and kills every
process of it, so it runs on a two-node cluster of its own: the session's shared real-node platform
(tests/clusters.py) stays whole for the tests that share it.
"""

from __future__ import annotations

import pytest

from clusters import fresh_run_dir, installed
from conftest import need_binaries
from trainstack.cluster.controlplane import BINARIES
from trainstack.e2e.providers.local import REAL_NODE_TOOLS, LocalProvider

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def two_nodes():
    need_binaries(*BINARIES, *REAL_NODE_TOOLS, "helm")
    with installed(LocalProvider(fresh_run_dir("nodeloss"), nodes="real", real_nodes=2)) as suite:
        yield suite


def test_a_real_node_lost_mid_training(two_nodes):
    """real-1 lost (link cut, every process killed) under a two-node TrainJob: the node goes NotReady, its pod
    is evicted after the runtime's nodeLostSeconds (30 s, not 300), the job resumes from its checkpoint on the
    node left (or fails with a reason); its Job ends once the lost pod is gone, which takes the node's return;
    the node rejoins Ready with nothing of the job left on it."""
    from trainstack.e2e.nodeloss import EVERY, node_lost

    r = node_lost(two_nodes.kube, two_nodes.provider.kubeconfig, two_nodes.provider.cluster.nodes)
    print(f"\nnode {r.node} lost under {r.job}: NotReady after {r.not_ready_s}s, pod evicted after {r.evicted_s}s, "
          f"the job's pods on the nodes left done after {r.work_done_s}s; TrainJob {r.state or 'not ended'} after "
          f"{r.ended_s}s ({r.reason}); resumed from step {r.resumed_from}; "
          f"node Ready again {r.rejoined_s}s after the loss; pods {r.pods_after}")
    assert len({p["node"] for p in r.pods_before}) == 2, r.pods_before
    assert r.not_ready_s is not None and r.evicted_s is not None and r.evicted_s >= r.not_ready_s, r
    # evicted once the toleration ran out: 30 s after NotReady, nowhere near Kubernetes' 300 s
    assert r.evicted_s - r.not_ready_s < 90, r
    assert r.state in ("Complete", "Failed"), r
    if r.state == "Complete":
        assert r.resumed_from is not None and r.resumed_from >= EVERY, r
        assert all(p["node"] != r.node for p in r.pods_after if p["phase"] == "Succeeded"), r.pods_after
    else:
        assert r.reason, r
    assert r.rejoined_s is not None and r.left_on_node == [], r
