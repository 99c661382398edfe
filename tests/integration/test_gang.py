"""The native gang scheduler of Kubernetes 1.36 on the local cluster (docs/scheduling.md), as a TrainJob
meets it: the chart (dev) on KWOK nodes, the lock's feature gates on the control plane.

Each test has a namespace and KWOK nodes of its own (labelled and tainted for that namespace alone; the
TrainJobs select and tolerate them through `runtimePatches`), each node room for one training pod, so
what binds where is the test's alone on the shared cluster. KWOK plays the kubelet; the scheduler's
PreEnqueue, Permit and binding are real.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import pytest
import yaml

from trainstack import api, monitoring
from trainstack.benchmarks.scale_meter import samples
from trainstack.cluster.kwok import FAIL_LABEL, GPU_RESOURCE, NodePool
from trainstack.jsontypes import dig

GANG_LABEL = "trainstack.io/gang-test"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
HOLD = {f"{FAIL_LABEL}/delay": "3600s", f"{FAIL_LABEL}/jitter-delay": "3600s"}
CPU_RUNTIME = "torch-distributed"
GPU_RUNTIME = "torch-distributed-gpu"


# -- the cluster as a test sees it ---------------------------------------------------------------------

class Gang:
    """One test's namespace, nodes and TrainJobs on the shared platform."""

    def __init__(self, kube: Any, namespace: str, scheduler_port: int) -> None:
        self.kube = kube
        self.scheduler_port = scheduler_port
        self.ns = namespace
        self.nodes: list[str] = []

    # nodes: room for one pod each (allocatable pods: 1), for this namespace only
    def add_nodes(self, count: int, runtime: dict[str, Any]) -> list[str]:
        pod = node_pod(runtime)
        gpus = gpu_limit(pod)
        taints = [{"key": GANG_LABEL, "value": self.ns, "effect": "NoSchedule"},
                  *({"key": t["key"], "value": t.get("value", ""), "effect": t.get("effect", "NoSchedule")}
                    for t in pod.get("tolerations") or [] if t.get("key"))]
        pool = NodePool(f"{self.ns}-{len(self.nodes)}", count=count, pods="1", labels={
            GANG_LABEL: self.ns, **(pod.get("nodeSelector") or {})}, taints=tuple(taints),
            extended={GPU_RESOURCE: str(gpus)} if gpus else {})
        self.kube.kubectl("create", "-f", "-", input_text=yaml.safe_dump_all(pool.nodes(), sort_keys=False))
        self.nodes += pool.node_names()
        wait(lambda: all(ready(self.kube.kubectl_json("get", "node", n)) for n in pool.node_names()), 60,
             "nodes Ready")
        return pool.node_names()

    def delete_nodes(self) -> None:
        if self.nodes:
            self.kube.kubectl("delete", "node", "--wait=false", "--ignore-not-found", *self.nodes, check=False)

    # TrainJobs on those nodes
    def submit(self, name: str, runtime: dict[str, Any], num_nodes: int, hold: bool = False,
               runtime_kind: str = "ClusterTrainingRuntime", suspend: bool = False) -> None:
        replicated = []
        for rj in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
            own = rj["template"]["spec"]["template"]["spec"]
            spec = {"nodeSelector": {**(own.get("nodeSelector") or {}), GANG_LABEL: self.ns},
                    "tolerations": [*(own.get("tolerations") or []),
                                    {"key": GANG_LABEL, "operator": "Equal", "value": self.ns, "effect": "NoSchedule"}]}
            template: dict[str, Any] = {"spec": spec}
            if hold:
                template["metadata"] = {"labels": {FAIL_LABEL: "true"}, "annotations": HOLD}
            replicated.append({"name": rj["name"], "template": {"spec": {"template": template}}})
        job = {"apiVersion": api.TRAINER_API, "kind": "TrainJob", "metadata": {"name": name, "namespace": self.ns},
               "spec": {"runtimeRef": {"name": runtime["metadata"]["name"], "kind": runtime_kind,
                                       "apiGroup": api.TRAINER_GROUP},
                        "trainer": {"numNodes": num_nodes},
                        **({"suspend": True} if suspend else {}),
                        "runtimePatches": [{"manager": "trainstack.io/gang-test", "trainingRuntimeSpec": {
                            "template": {"spec": {"replicatedJobs": replicated}}}}]}}
        self.kube.kubectl("create", "-f", "-", input_text=yaml.safe_dump(job))

    def release(self, name: str) -> None:
        """Let KWOK complete the held pods of TrainJob NAME."""
        self.kube.kubectl("label", "pods", "-n", self.ns, "-l", f"{JOBSET_NAME_LABEL}={name}", f"{FAIL_LABEL}-")

    def pods(self, name: str, step: str = "node") -> list[dict[str, Any]]:
        return self.kube.kubectl_json("get", "pods", "-n", self.ns, "-l",
                                      f"{JOBSET_NAME_LABEL}={name},{REPLICATED_JOB_LABEL}={step}")["items"]

    def bound(self, name: str) -> list[dict[str, Any]]:
        return [p for p in self.pods(name) if p["spec"].get("nodeName")]

    def podgroups(self) -> list[dict[str, Any]]:
        return self.kube.kubectl_json("get", api.PODGROUPS, "-n", self.ns)["items"]

    def workloads(self) -> list[dict[str, Any]]:
        return self.kube.kubectl_json("get", api.WORKLOADS, "-n", self.ns)["items"]

    def complete(self, name: str) -> bool:
        job = self.kube.kubectl_json("get", "trainjob", "-n", self.ns, name)
        return any(c["type"] == "Complete" and c["status"] == "True" for c in job.get("status", {}).get("conditions", []))

    def runtime(self, name: str) -> dict[str, Any]:
        return self.kube.kubectl_json("get", "clustertrainingruntime", name)


def node_pod(runtime: dict[str, Any]) -> dict[str, Any]:
    jobs = {rj["name"]: rj for rj in runtime["spec"]["template"]["spec"]["replicatedJobs"]}
    return jobs["node"]["template"]["spec"]["template"]["spec"]


def gpu_limit(pod: dict[str, Any]) -> int:
    return max((int(dig(c, "resources", "limits", default={}).get(GPU_RESOURCE, 0)) for c in pod["containers"]),
               default=0)


def controller_of(obj: dict[str, Any]) -> dict[str, Any]:
    return next(o for o in obj["metadata"].get("ownerReferences", []) if o.get("controller"))


def ready(node: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in node.get("status", {}).get("conditions", []))


def scheduled_at(pod: dict[str, Any]) -> datetime:
    cond = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled" and c["status"] == "True")
    return datetime.fromisoformat(cond["lastTransitionTime"])


def wait(check: Callable[[], Any], timeout: float, what: str, every: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f}s")
        time.sleep(every)


@pytest.fixture
def gang(platform, namespace) -> Iterator[Gang]:
    found = Gang(platform.kube, namespace, platform.provider.cluster.ports()["kube-scheduler"])
    try:
        yield found
    finally:
        found.delete_nodes()


# -- the checks ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("runtime_name", [CPU_RUNTIME, GPU_RUNTIME])
def test_multi_node_trainjob_gets_one_podgroup_of_its_size_and_its_pods_bind_together(gang, runtime_name):
    """A 3-node TrainJob (golden runtime, no podGroupPolicy): the Job controller makes one Workload and one
    PodGroup, gang minCount 3, for the node step's Job; its pods name that PodGroup and bind at once."""
    runtime = gang.runtime(runtime_name)
    assert "podGroupPolicy" not in runtime["spec"]
    nodes = gang.add_nodes(3, runtime)
    gang.submit("gang3", runtime, 3, hold=True)
    pods = wait(lambda: len(gang.bound("gang3")) == 3 and gang.bound("gang3"), 90, "3 pods bound")
    assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(nodes)
    groups = gang.podgroups()
    assert len(groups) == 1, groups
    group = groups[0]
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 3}}
    owner = controller_of(group)
    assert owner["kind"] == "Job" and owner["name"] == pods[0]["metadata"]["labels"][JOB_NAME_LABEL]
    assert {p["spec"].get("schedulingGroup", {}).get("podGroupName") for p in pods} == {group["metadata"]["name"]}
    assert len(gang.workloads()) == 1
    times = sorted(scheduled_at(p) for p in pods)
    assert (times[-1] - times[0]).total_seconds() <= 1, times
    gang.release("gang3")
    wait(lambda: gang.complete("gang3"), 90, "TrainJob gang3 Complete")


def podgroup_attempts(gang: Gang) -> float:
    """How many pod-group scheduling cycles the cluster's kube-scheduler has run (its /metrics, on 127.0.0.1)."""
    text = monitoring.scrape(f"https://127.0.0.1:{gang.scheduler_port}/metrics")
    return sum(value for _, value in samples(text).get("scheduler_podgroup_schedule_attempts_total", []))


def test_trainjob_needing_more_nodes_than_free_binds_nothing_then_runs_when_room_appears(gang):
    """3 nodes asked, 2 free: no pod binds, nothing is held on the nodes, and the scheduler waits rather than
    spins (the lock's schedulerFeatureGates, docs/scheduling.md: with 1.36.3's defaults it tried such a gang
    about 9,400 times a second); a third node lets all 3 bind."""
    runtime = gang.runtime(CPU_RUNTIME)
    gang.add_nodes(2, runtime)
    gang.submit("big", runtime, 3)
    wait(lambda: len(gang.pods("big")) == 3, 60, "3 pods created")
    wait(lambda: gang.podgroups(), 30, "a PodGroup")
    assert [g["spec"]["schedulingPolicy"]["gang"]["minCount"] for g in gang.podgroups()] == [3]
    attempts = podgroup_attempts(gang)
    end = time.monotonic() + 20
    while time.monotonic() < end:
        assert gang.bound("big") == [], "a pod of a gang that cannot fit was bound"
        time.sleep(1)
    # backoff of 1 s doubling to the local scheduler's 2 s cap: about ten cycles in 20 s (other tests' gangs
    # on this cluster may add theirs); without the gate, hundreds of thousands
    tried = podgroup_attempts(gang) - attempts
    assert 0 < tried <= 100, f"{tried:.0f} pod-group scheduling cycles in 20 s"
    for node in gang.nodes:
        held = gang.kube.kubectl_json("get", "pods", "-A", "--field-selector", f"spec.nodeName={node}")["items"]
        assert held == [], (node, [p["metadata"]["name"] for p in held])
    added = time.monotonic()
    gang.add_nodes(1, runtime)
    wait(lambda: gang.complete("big"), 120, "TrainJob big Complete once a third node is there")
    print(f"gang of 3 ran {time.monotonic() - added:.1f}s after the third node came")


def test_two_trainjobs_that_fit_alone_but_not_together_both_complete(gang):
    """Two 2-node TrainJobs on 2 nodes, submitted together: one binds whole, the other binds nothing while
    the first holds the nodes (no deadlock of two half-placed gangs: 1.36 schedules a PodGroup in one
    cycle), and binds within seconds of the first finishing, far from the 5-minute permit timeout. The
    loser's wait after the winner ends is measured."""
    runtime = gang.runtime(CPU_RUNTIME)
    gang.add_nodes(2, runtime)
    gang.submit("first", runtime, 2, hold=True)
    gang.submit("second", runtime, 2, hold=True)
    counts = wait(lambda: (c := {n: len(gang.bound(n)) for n in ("first", "second")}) and 2 in c.values() and c,
                  90, "one TrainJob bound whole")
    winner = next(n for n, c in counts.items() if c == 2)
    loser = "second" if winner == "first" else "first"
    end = time.monotonic() + 10
    while time.monotonic() < end:
        assert gang.bound(loser) == [], f"{loser} got a pod bound while {winner} held both nodes"
        time.sleep(1)
    gang.release(winner)
    released = time.monotonic()
    wait(lambda: len(gang.bound(loser)) == 2, 330, f"{loser} bound after {winner} finished")
    waited = time.monotonic() - released
    print(f"gang loser {loser} bound {waited:.1f}s after the winner {winner} was released")
    assert waited < 60, waited
    gang.release(loser)
    for name in (winner, loser):
        wait(lambda n=name: gang.complete(n), 90, f"TrainJob {name} Complete")
    assert sorted(g["spec"]["schedulingPolicy"]["gang"]["minCount"] for g in gang.podgroups()) == [2, 2]


def test_single_node_trainjob_and_initializer_steps_get_no_podgroup(gang):
    """A 1-node TrainJob's Job (parallelism 1) and an initializer step's Job are not gangs: no PodGroup,
    no schedulingGroup on their pods; the multi-node node step of the same TrainJob still is one."""
    golden = gang.runtime(CPU_RUNTIME)
    gang.add_nodes(2, golden)
    gang.submit("single", golden, 1)
    wait(lambda: gang.complete("single"), 90, "TrainJob single Complete")
    assert gang.podgroups() == []
    node = node_pod(golden)
    init_step = {"name": "dataset-initializer", "template": {
        "metadata": {"labels": {api.ANCESTOR_LABEL: "dataset-initializer"}},
        "spec": {"template": {"spec": {"containers": [{**node["containers"][0], "name": "dataset-initializer",
                                                     "command": ["true"]}],
                                       "securityContext": node.get("securityContext", {})}}}}}
    node_step = next(rj for rj in golden["spec"]["template"]["spec"]["replicatedJobs"] if rj["name"] == "node")
    runtime = {"apiVersion": api.TRAINER_API, "kind": "TrainingRuntime",
               "metadata": {"name": "with-init", "namespace": gang.ns,
                            "labels": {api.FRAMEWORK_LABEL: golden["metadata"]["labels"][api.FRAMEWORK_LABEL]}},
               "spec": {"mlPolicy": golden["spec"]["mlPolicy"], "template": {"spec": {"replicatedJobs": [
                   init_step, {**node_step, "dependsOn": [{"name": "dataset-initializer", "status": "Complete"}]}]}}}}
    gang.kube.kubectl("create", "-f", "-", input_text=yaml.safe_dump(runtime))
    gang.submit("init", runtime, 2, runtime_kind="TrainingRuntime")
    wait(lambda: gang.complete("init"), 120, "TrainJob init Complete")
    init_pods = gang.pods("init", "dataset-initializer")
    assert init_pods and all("schedulingGroup" not in p["spec"] for p in init_pods)
    groups = gang.podgroups()
    assert [g["spec"]["schedulingPolicy"]["gang"]["minCount"] for g in groups] == [2], groups
    assert controller_of(groups[0])["name"].endswith("-node-0")


def test_trainjob_created_suspended_as_kueue_creates_them_gets_its_podgroup_when_resumed(gang):
    """What Kueue does, without Kueue: a TrainJob created suspended has its JobSet's Jobs created suspended;
    resumed, its 2-node node Job still gets a PodGroup (minCount 2) from the 1.36 Job controller, and its pods
    name it. (The research notes expected none: the Job controller's "never suspended" rule did not stop it.)"""
    runtime = gang.runtime(CPU_RUNTIME)
    gang.add_nodes(2, runtime)
    gang.submit("later", runtime, 2, suspend=True)
    jobs = wait(lambda: gang.kube.kubectl_json("get", "jobs", "-n", gang.ns, "-l", f"{JOBSET_NAME_LABEL}=later")["items"],
                60, "the suspended TrainJob's Jobs")
    assert all(j["spec"].get("suspend") for j in jobs), [j["spec"].get("suspend") for j in jobs]
    assert all(not p["spec"].get("nodeName") for p in gang.pods("later"))
    gang.kube.kubectl("patch", "trainjob", "later", "-n", gang.ns, "--type=merge", "-p", '{"spec":{"suspend":false}}')
    wait(lambda: gang.complete("later"), 90, "TrainJob later Complete after resuming")
    groups = gang.podgroups()
    assert [g["spec"]["schedulingPolicy"]["gang"]["minCount"] for g in groups] == [2], groups
    assert controller_of(groups[0])["name"].endswith("-node-0")
    assert {p["spec"].get("schedulingGroup", {}).get("podGroupName") for p in gang.pods("later")} == \
        {groups[0]["metadata"]["name"]}
