"""`trainstack status` against a real kube-apiserver holding 1,000 TrainJobs in 10 namespaces:
correct counts per state, the controllers' versions, readiness and leader, progress from
status.trainerStatus, in seconds."""

from __future__ import annotations

import json
import time

import pytest
import yaml

from conftest import ROOT
from support.cli import run_cli
from support.clusters import scratch
from trainstack import yamlio

NAMESPACES = [f"team-{i}" for i in range(10)]
PER_NAMESPACE = 100


def trainjob(namespace: str, i: int) -> dict:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": f"job-{i:03d}", "namespace": namespace},
            "spec": {"runtimeRef": {"name": "torch-distributed"}, "suspend": i % 10 == 9}}


@pytest.fixture
def local_cluster(local_cluster):
    """The shared bare cluster (tests/support/clusters.py): the modules before removed what they made there, so
    only what this test makes is listed; its namespaces, TrainJobs and platform objects are deleted after."""
    with scratch(local_cluster) as cluster:
        yield cluster


def test_status_with_1000_trainjobs(local_cluster, lock):
    crds = [yamlio.load(p.read_text()) for p in sorted((ROOT / "charts" / "trainstack" / "crds").glob("*.yaml"))]
    local_cluster.apply(crds, server_side=True)
    local_cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                          *[f"crd/{c['metadata']['name']}" for c in crds])
    image = lock.image("trainer-controller-manager")
    platform = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kubeflow-system"}},
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": "kubeflow-trainer-controller-manager", "namespace": "kubeflow-system"},
         "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "trainer"}},
                  "template": {"metadata": {"labels": {"app": "trainer"}},
                               "spec": {"containers": [{"name": "manager", "image": image.reference()}]}}}},
        {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
         "metadata": {"name": "trainer.kubeflow.org", "namespace": "kubeflow-system"},
         "spec": {"holderIdentity": "kubeflow-trainer-controller-manager-5d8f-abcde_0f1e2d3c"}},
        {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
         "metadata": {"name": "torch-distributed", "labels": {"app.kubernetes.io/part-of": "trainstack",
                                                              "trainer.kubeflow.org/framework": "torch"}},
         "spec": {"mlPolicy": {"numNodes": 1, "torch": {}},
                  "template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {
                      "spec": {"containers": [{"name": "node", "image": lock.image("torch").reference()}]}}}}}]}}}},
    ]
    platform += [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}} for ns in NAMESPACES]
    local_cluster.apply(platform)
    start = time.monotonic()
    jobs = [trainjob(ns, i) for ns in NAMESPACES for i in range(PER_NAMESPACE)]
    for chunk in range(0, len(jobs), 250):
        local_cluster.kubectl("create", "-f", "-", input_text=yaml.safe_dump_all(jobs[chunk:chunk + 250]), timeout=300)
    created_s = time.monotonic() - start
    now = "2026-12-01T00:00:00Z"
    patches = {"job-000": {"conditions": [{"type": "Complete", "status": "True", "reason": "JobsCompleted",
                                           "message": "done", "lastTransitionTime": now}]},
               "job-001": {"conditions": [{"type": "Failed", "status": "True", "reason": "JobsFailed",
                                           "message": "failed", "lastTransitionTime": now}]},
               "job-002": {"jobsStatus": [{"name": "node", "active": 2, "ready": 2, "succeeded": 0, "failed": 0,
                                           "suspended": 0}],
                           "trainerStatus": {"progressPercentage": 42, "estimatedRemainingSeconds": 120,
                                             "lastUpdatedTime": now}}}
    for name, body in patches.items():
        local_cluster.kubectl("patch", "trainjob", name, "-n", "team-0", "--subresource=status", "--type=merge",
                              "-p", json.dumps({"status": body}))

    start = time.monotonic()
    result = run_cli("status", "-A", "--output", "json", env={"KUBECONFIG": str(local_cluster.kubeconfig)})
    wall_s = time.monotonic() - start
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert len(report["trainjobs"]["items"]) == 1000
    summary = {row["namespace"]: row for row in report["trainjobs"]["summary"]}
    assert set(summary) == set(NAMESPACES)
    assert summary["team-0"] == {"namespace": "team-0", "Pending": 87, "Running": 1, "Suspended": 10, "Complete": 1,
                                 "Failed": 1, "oldest_active_s": summary["team-0"]["oldest_active_s"]}
    assert summary["team-5"]["Pending"] == 90 and summary["team-5"]["Suspended"] == 10
    running = next(t for t in report["trainjobs"]["items"] if t["namespace"] == "team-0" and t["name"] == "job-002")
    assert running["state"] == "Running" and running["progress"] == 42 and running["remaining_s"] == 120
    [trainer] = report["components"]
    assert trainer["version"] == trainer["pinned"] == image.tag
    assert trainer["leader"] == "kubeflow-trainer-controller-manager-5d8f-abcde"
    assert report["runtimes"] == [{"name": "torch-distributed", "golden": True, "framework": "torch"}]
    assert wall_s < 15, wall_s  # the whole CLI process, Python start-up included
    text = run_cli("status", "-n", "team-0", env={"KUBECONFIG": str(local_cluster.kubeconfig)})
    assert text.returncode == 0 and "42% (2m left)" in text.stdout and "job-099" in text.stdout
    print(f"created 1000 TrainJobs in {created_s:.1f}s; status -A --output json took {wall_s:.2f}s "
          f"(collect {report['seconds']:.2f}s)")
