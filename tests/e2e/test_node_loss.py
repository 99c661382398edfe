"""Two real nodes of the module's own (tests/e2e: real nodes): first the native gang scheduler on them (a
TrainJob that needs more nodes than have room binds nothing while a job that fits runs), then a real node
lost mid-training. The fault cuts real-1's link and kills every process of it, so the module has a cluster
of its own: the session's shared real-node platform (tests/support/clusters.py) stays whole for the tests that
share it.
"""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Any

import pytest
import yaml

from conftest import need_binaries
from support.clusters import fresh_run_dir, installed
from trainstack import api
from trainstack.cluster.controlplane import BINARIES
from trainstack.e2e import teams_live as tl
from trainstack.e2e.providers.local import REAL_NODE_TOOLS, LocalProvider
from trainstack.jsontypes import dig
from trainstack.quantity import parse as quantity

pytestmark = pytest.mark.e2e
REAL_NODE_GROUP = 2  # real nodes on clusters of its own, beside the first group (tests/e2e/conftest.py)


@pytest.fixture(scope="module")
def two_nodes():
    need_binaries(*BINARIES, *REAL_NODE_TOOLS, "helm")
    with installed(LocalProvider(fresh_run_dir("nodeloss"), nodes="real", real_nodes=2)) as suite:
        yield suite


GANG_NS = "gang-real"


def _free_cpu(kube: Any, node: dict[str, Any]) -> Decimal:
    """NODE's allocatable CPU less what the pods bound to it request (as the scheduler counts it)."""
    name = node["metadata"]["name"]
    pods = kube.kubectl_json("get", "pods", "-A", "--field-selector",
                             f"spec.nodeName={name},status.phase!=Succeeded,status.phase!=Failed")["items"]
    used = Decimal(0)
    for pod in pods:
        containers = sum((quantity(dig(c, "resources", "requests", "cpu", default="0"))
                          for c in pod["spec"]["containers"]), Decimal(0))
        inits = [quantity(dig(c, "resources", "requests", "cpu", default="0"))
                 for c in pod["spec"].get("initContainers") or []]
        used += max([containers, *inits])
    return quantity(node["status"]["allocatable"]["cpu"]) - used


def _submit(kube: Any, name: str, nodes: int, cpu: str) -> None:
    job = {"apiVersion": api.TRAINER_API, "kind": "TrainJob", "metadata": {"name": name, "namespace": GANG_NS},
           "spec": {"runtimeRef": {"name": "torch-distributed", "kind": "ClusterTrainingRuntime",
                                   "apiGroup": api.TRAINER_GROUP},
                    "trainer": {"numNodes": nodes, "command": ["python3", "-c", "print('trained')"],
                                "resourcesPerNode": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}}}}
    kube.kubectl("create", "-f", "-", input_text=yaml.safe_dump(job))


def _state(kube: Any, name: str) -> str:
    """Complete or Failed once TrainJob NAME has ended, else ''."""
    conds = tl.conditions(tl.trainjob(kube, GANG_NS, name))
    return next((kind for kind in ("Complete", "Failed") if conds.get(kind) == "True"), "")


def test_a_gang_that_cannot_fit_binds_nothing_on_real_nodes_and_a_job_that_fits_runs(two_nodes):
    """Kubernetes 1.36's gang scheduler on the two real nodes (docs/scheduling.md; tests/integration/test_gang.py
    has the same on KWOK nodes): each pod asks for more than half of the CPU either node has free, so each node
    takes one. A 3-node TrainJob gets one PodGroup of minCount 3 and binds none of its pods; a 2-node TrainJob
    submitted beside it binds on both nodes and completes, so the blocked gang holds no node."""
    kube = two_nodes.kube
    real = [n for n in kube.kubectl_json("get", "nodes")["items"]
            if n["metadata"]["name"] in {r.name for r in two_nodes.provider.cluster.nodes}]
    free = sorted(_free_cpu(kube, n) for n in real)
    per_pod = (free[-1] / 2 + Decimal("0.05")).quantize(Decimal("0.001"))
    assert len(real) == 2 and per_pod <= free[0], f"free CPU on the real nodes: {free}"
    cpu = f"{int(per_pod * 1000)}m"
    kube.kubectl("create", "namespace", GANG_NS)
    try:
        _submit(kube, "gang3", 3, cpu)
        deadline = time.monotonic() + 60
        while len(tl.pods(kube, GANG_NS, "gang3")) < 3 or not kube.kubectl_json("get", api.PODGROUPS, "-n", GANG_NS)["items"]:
            assert time.monotonic() < deadline, "3 pods and a PodGroup within 60 s"
            time.sleep(1)
        groups = kube.kubectl_json("get", api.PODGROUPS, "-n", GANG_NS)["items"]
        assert [g["spec"]["schedulingPolicy"] for g in groups] == [{"gang": {"minCount": 3}}], groups
        blocked_since = time.monotonic()
        while time.monotonic() - blocked_since < 15:
            assert [p["metadata"]["name"] for p in tl.pods(kube, GANG_NS, "gang3") if p["spec"].get("nodeName")] == []
            time.sleep(1)
        submitted = time.monotonic()
        _submit(kube, "fits2", 2, cpu)
        deadline = submitted + 420
        while not _state(kube, "fits2"):
            assert [p["metadata"]["name"] for p in tl.pods(kube, GANG_NS, "gang3") if p["spec"].get("nodeName")] == [], \
                "a pod of the gang that cannot fit was bound"
            assert time.monotonic() < deadline, "TrainJob fits2 did not end within 420 s"
            time.sleep(1)
        waited = time.monotonic() - submitted
        assert _state(kube, "fits2") == "Complete"
        ran_on = sorted(p["spec"]["nodeName"] for p in tl.pods(kube, GANG_NS, "fits2"))
        assert ran_on == sorted(n["metadata"]["name"] for n in real), ran_on
        assert [p["spec"].get("nodeName") for p in tl.pods(kube, GANG_NS, "gang3")] == [None] * 3
        print(f"\n{cpu} CPU per pod (free: {[str(f) for f in free]}): gang3 (3 nodes) bound nothing for "
              f"{time.monotonic() - blocked_since:.0f} s; fits2 (2 nodes) Complete {waited:.1f} s after submission, "
              f"on {ran_on}")
    finally:
        kube.kubectl("delete", "namespace", GANG_NS, "--wait=false", check=False)


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
