"""Teams live on the local cluster: the chart installed with two teams and Kueue running.

The cluster is the local provider's with a real node beside the KWOK pools (`--nodes both`): the
chart's controllers run as the chart's Deployments on the real node, Kueue among them (the
`kueue.install` subchart: its Deployment, ConfigMap with the TrainJob integration on, RBAC,
webhooks and its own webhook certificate rotation, from an image built here like the other
controllers' (builtImages `kueue-controller`), pulled from the cluster's registry). A host
process was not an option: with its certificate management off (no Secret volume for a local
process), Kueue v0.19.2 insists on metrics certificates at the fixed path
/etc/kueue/metrics/certs. The GPU pools are KWOK nodes, tainted like real GPU nodes; their pods
"run" by KWOK's stages.

The values are the teams example (examples/teams/values.yaml, the entries `trainstack team add`
writes) plus `kueue.install` and two GPUs for team-b, so that the cohort has more GPUs than team-a
may use with its borrowing limit: "no further" is the limit, not an empty cohort.

A GPU TrainJob that should keep its quota is held Running: its pods carry KWOK's
`pod-container-running-failed` label with an hour's delay, so KWOK's pod-complete stage skips
them and the failing stage waits; `release` removes the label and KWOK completes the pods, so the
Job, the JobSet and the TrainJob end Complete and Kueue gives the quota back.

Kueue's configuration is the chart's (upstream's default plus `waitForPodsReady` with
`blockAdmission`), with the timeout shortened to PODS_READY_TIMEOUT so that a job whose pods cannot
all become Ready is evicted within the test; `unplaceable` gives a job such pods (a node selector
no node has).

`teams.kueue.topologyAware` (TOPOLOGY_ARGS, turned on by the module's last `helm upgrade`): `tainted`
and `filled` leave a GPU node's room for a given number of pods, and `topology_assignment` reads the
nodes Kueue assigned to a Workload's pods.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from .. import api, kubeapi, paths, quantity, yamlio
from ..cluster import node as nodemod
from ..cluster.local import FAIL_LABEL
from ..errors import UserError
from ..jsontypes import dig
from .providers.local import LocalProvider

TEAMS_EXAMPLE = Path("examples") / "teams" / "values.yaml"
GPU_RUNTIME = "torch-distributed-gpu"
GPU_RESOURCE = "nvidia.com/gpu"
QUEUE_LABEL = api.QUEUE_LABEL
TEAM_LABEL = "trainstack.io/team"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
HOLD_DELAY = "3600s"
# long enough for KWOK pods to turn Ready on a loaded 2-core machine (20 s evicted a quota test's running
# job now and then while another group's cluster ran beside), short enough to see the eviction in a test
PODS_READY_TIMEOUT = "45s"
NOWHERE = {"trainstack.io/e2e-nowhere": "true"}
KUEUE_GROUP = api.KUEUE_GROUP
# teams.kueue.topologyAware on this cluster: the CPU pool's flavor selects the pool's nodes (real and KWOK)
TOPOLOGY_ARGS = ("--set", "teams.kueue.topologyAware=true", "--set-string", r"runtimes.cpu.nodeSelector.trainstack\.io/pool=cpu")
HOSTNAME_LEVEL = "kubernetes.io/hostname"
BUSY_TAINT = {"key": "trainstack.io/e2e-busy", "value": "true", "effect": "NoSchedule"}
FILLER = "e2e-gpu-filler"
OVERRIDES = {
    "kueue": {"install": True},
    # team-b lends two GPUs; team-a may borrow one: the cohort keeps one idle GPU team-a may not take
    "teams": {"team-b": {"quota": {GPU_RESOURCE: 2}}},
}


def teams_values(run_dir: Path, mirror: str | None = None, kueue_repository: str = "") -> list[Path]:
    """The values files the teams cluster adds to the environment's: the example, then OVERRIDES
    (with `mirror`: Kueue's image from the cluster's registry, and requests that fit the real node)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    values = json.loads(json.dumps(OVERRIDES))
    values["kueue"]["managerConfig"] = {"controllerManagerConfigYaml": kueue_config()}
    if mirror:
        # no output volumes (the real node's static PVs are for the CPU smoke jobs, GPU pods run on KWOK)
        values["runtimes"] = {"defaults": {"output": {"enabled": False}}}
        values["kueue"]["controllerManager"] = {"manager": {
            "image": {"repository": f"{mirror}/{kueue_repository}"},
            "resources": {"requests": {"cpu": "50m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}}}}
    override = run_dir / "values-teams-live.yaml"
    override.write_text("# written by trainstack's live teams check (e2e/teams_live.py)\n" + yaml.safe_dump(values))
    return [paths.repo_root() / TEAMS_EXAMPLE, override]


def kueue_config() -> str:
    """The chart's Kueue configuration with waitForPodsReady's timeout shortened to PODS_READY_TIMEOUT."""
    values = yamlio.load((paths.chart_dir() / "values.yaml").read_text())
    config = yamlio.load(values["kueue"]["managerConfig"]["controllerManagerConfigYaml"])
    config["waitForPodsReady"]["timeout"] = PODS_READY_TIMEOUT
    return yaml.safe_dump(config, sort_keys=False)


class TeamsProvider(LocalProvider):
    """The local provider (a real node beside the KWOK pools) with the teams values added to the
    environment's, and Kueue's image among those built for the real node."""

    def __init__(self, run_dir: Path, **kwargs: Any) -> None:
        kwargs.setdefault("nodes", "both")
        super().__init__(run_dir, reason="two teams with Kueue quotas: the controllers and Kueue as pods on a "
                                         "real node, KWOK GPU pools", **kwargs)

    def values_files(self) -> list[Path]:
        mirror = nodemod.MIRROR if self.real else None
        return [*super().values_files(),
                *teams_values(self.run_dir, mirror, self.lock.image("kueue-controller").repository)]

    def needed_images(self, suite: Any) -> list[str]:
        return [*super().needed_images(suite), "kueue-controller"]


def gpu_trainjob(name: str, namespace: str, team: str, runtime: dict[str, Any], num_nodes: int = 1,
                 hold: bool = True, unplaceable: bool = False) -> dict[str, Any]:
    """A TrainJob of `team` on the GPU runtime (one GPU per node); `hold` keeps its pods Running,
    `unplaceable` keeps them Pending (a node selector no node has)."""
    job: dict[str, Any] = {
        "apiVersion": api.TRAINER_API,
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": namespace, "labels": {TEAM_LABEL: team, QUEUE_LABEL: team}},
        "spec": {"runtimeRef": {"name": runtime["metadata"]["name"]}, "trainer": {"numNodes": num_nodes}},
    }
    if hold:
        annotations = {f"{FAIL_LABEL}/delay": HOLD_DELAY, f"{FAIL_LABEL}/jitter-delay": HOLD_DELAY}
        replicated = [{"name": rj["name"], "template": {"spec": {"template": {"metadata": {
            "labels": {FAIL_LABEL: "true"}, "annotations": annotations}}}}}
            for rj in runtime["spec"]["template"]["spec"]["replicatedJobs"]]
        job["spec"]["runtimePatches"] = [{"manager": "trainstack.io/e2e-hold", "trainingRuntimeSpec": {
            "template": {"spec": {"replicatedJobs": replicated}}}}]
    if unplaceable:
        nowhere = [{"name": rj["name"], "template": {"spec": {"template": {"spec": {"nodeSelector": NOWHERE}}}}}
                   for rj in runtime["spec"]["template"]["spec"]["replicatedJobs"]]
        job["spec"].setdefault("runtimePatches", []).append({"manager": "trainstack.io/e2e-nowhere", "trainingRuntimeSpec": {
            "template": {"spec": {"replicatedJobs": nowhere}}}})
    return job


def submit(kube: Any, job: dict[str, Any]) -> None:
    kube.kubectl("create", "-f", "-", input_text=yaml.safe_dump(job))


def drain(kube: Any, teams: tuple[str, ...] = ("team-a", "team-b")) -> None:
    """Delete every TrainJob of TEAMS and wait until Kueue says their ClusterQueues hold no GPU."""
    for team in teams:
        kube.kubectl("delete", "trainjobs.trainer.kubeflow.org", "--all", "-n", team, "--wait=true", timeout=120)
    wait_until(lambda: all(gpu_usage(kube, team) == {"total": 0, "borrowed": 0} for team in teams),
               "the teams' GPUs free")


def release(kube: Any, namespace: str, name: str) -> None:
    """Let KWOK complete the held pods of TrainJob `name`."""
    kube.kubectl("label", "pods", "-n", namespace, "-l", f"{JOBSET_NAME_LABEL}={name}", f"{FAIL_LABEL}-")


# -- reads (the kubernetes client); wait_until watches what its check read ----------------------------

_reads = threading.local()  # while wait_until runs a check: the lists it read, to watch them


def _list(kube: Any, what: str, list_call: Callable[[Any], Callable[..., Any]], **selectors: Any
          ) -> list[dict[str, Any]]:
    """One list (LIST_CALL(api) with SELECTORS) of KUBE's cluster, noted for wait_until's watches under WHAT."""
    api = kubeapi.for_kube(kube)
    call = list_call(api)
    seen = getattr(_reads, "seen", None)
    if seen is not None:
        seen[(id(api), what, tuple(sorted(selectors.items())))] = (api, call, selectors)
    return kubeapi.items(api, call, **selectors)


def _kueue(plural: str, namespace: str | None = None) -> Callable[[Any], Callable[..., Any]]:
    return lambda api: kubeapi.custom_objects(api, KUEUE_GROUP, kubeapi.preferred_version(api, KUEUE_GROUP), plural, namespace)


def trainjob(kube: Any, namespace: str, name: str) -> dict[str, Any]:
    found = _list(kube, f"trainjobs/{namespace}", lambda api: kubeapi.resource(api, "trainjobs", namespace),
                  field_selector=f"metadata.name={name}")
    if not found:
        raise UserError(f"no TrainJob {namespace}/{name}")
    return found[0]


def conditions(obj: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in dig(obj, "status", "conditions") or []}


def workload(kube: Any, namespace: str, name: str) -> dict[str, Any] | None:
    """Kueue's Workload of TrainJob `name` (by owner reference), or None."""
    for item in _list(kube, f"workloads/{namespace}", _kueue("workloads", namespace)):
        if any(ref.get("kind") == "TrainJob" and ref.get("name") == name
               for ref in item["metadata"].get("ownerReferences") or []):
            return item
    return None


def pods(kube: Any, namespace: str, name: str) -> list[dict[str, Any]]:
    return _list(kube, "pods", kubeapi.pods, namespace=namespace, label_selector=f"{JOBSET_NAME_LABEL}={name}")


def state(kube: Any, namespace: str, name: str) -> dict[str, Any]:
    """What a user sees of one TrainJob under Kueue: suspended, admitted, its pods and their nodes."""
    job = trainjob(kube, namespace, name)
    wl = workload(kube, namespace, name)
    wl_conds = conditions(wl) if wl else {}
    phases = [dig(p, "status", "phase") for p in pods(kube, namespace, name)]
    job_conds = conditions(job)
    return {
        "suspended": bool(job["spec"].get("suspend")),
        "workload": (wl or {}).get("metadata", {}).get("name"),
        "admitted": wl_conds.get("Admitted") == "True",
        "quota_reserved": wl_conds.get("QuotaReserved") == "True",
        "pending_reason": next((c.get("message", "") for c in dig(wl, "status", "conditions") or []
                                if c["type"] == "QuotaReserved" and c["status"] != "True"), ""),
        "pods_ready": wl_conds.get("PodsReady") == "True",
        "evicted": next((c.get("reason", "") for c in dig(wl, "status", "conditions") or []
                         if c["type"] == "Evicted" and c["status"] == "True"), ""),
        "requeues": dig(wl, "status", "requeueState", "count", default=0),
        "pods": len(phases),
        "pending_pods": phases.count("Pending"),
        "running_pods": phases.count("Running"),
        "complete": job_conds.get("Complete") == "True",
        "failed": job_conds.get("Failed") == "True",
    }


def wait_until(check: Callable[[], Any], what: str, timeout: float = 90, interval: float = 1.0,
               explain: Callable[[], Any] | None = None) -> Any:
    """Run `check()` until it returns something true; a UserError with the last value after `timeout`.

    The lists `check` read through this module (TrainJobs, Workloads, pods, ClusterQueues) are watched and
    `check` runs again when one of them changes (at least every 5s); a check that read nothing here is
    run again every `interval` seconds."""
    deadline = time.monotonic() + timeout
    value = None
    with kubeapi.Changes(timeout) as changes:
        while True:
            _reads.seen = {}
            try:
                value = check()
            finally:
                seen, _reads.seen = _reads.seen, None
            if value:
                return value
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            for key, (api, call, selectors) in seen.items():
                changes.watch(key, api, call, **selectors)
            if changes.watched:
                changes.changed(min(remaining, 5.0))
            else:
                time.sleep(min(interval, remaining))
    said = f"not within {timeout:.0f}s: {what} (last: {json.dumps(value, default=str)[:600]})"
    if explain is not None:
        said += f"; {json.dumps(explain(), default=str)[:1500]}"
    raise UserError(said)


def wait_complete(kube: Any, namespace: str, name: str, timeout: float = 240) -> dict[str, Any]:
    """Wait for TrainJob `name` to be Complete; on a timeout the error holds its state, the conditions of
    its TrainJob, Workload, JobSet and Jobs, and each pod's phase and labels (what was still holding it).
    The timeout leaves room for one PodsReadyTimeout eviction and Kueue's requeue backoff (60 s and up)
    on a busy machine: completing is what callers rely on, not how fast."""
    def explain() -> dict[str, Any]:
        api = kubeapi.for_kube(kube)
        selector = f"{JOBSET_NAME_LABEL}={name}"
        jobs = kubeapi.items(api, kubeapi.resource(api, "jobs", namespace), label_selector=selector)
        jobsets = [j for j in kubeapi.items(api, kubeapi.resource(api, "jobsets", namespace))
                   if j["metadata"]["name"] == name]
        return {"state": state(kube, namespace, name),
                "trainjob": conditions(trainjob(kube, namespace, name)),
                "workload": conditions(workload(kube, namespace, name) or {}),
                "jobsets": [conditions(j) for j in jobsets],
                "jobs": {j["metadata"]["name"]: [conditions(j), dig(j, "status", "succeeded")] for j in jobs},
                "pods": {p["metadata"]["name"]: [dig(p, "status", "phase"),
                                                 dig(p["metadata"], "labels", FAIL_LABEL),
                                                 p["metadata"].get("deletionTimestamp")]
                         for p in pods(kube, namespace, name)}}

    return wait_until(lambda: (st := state(kube, namespace, name))["complete"] and st, f"{name} Complete",
                      timeout=timeout, explain=explain)


def gpu_usage(kube: Any, cluster_queue: str) -> dict[str, int]:
    """ClusterQueue `cluster_queue`'s admitted GPUs: {"total": n, "borrowed": m} (Kueue's status)."""
    found = _list(kube, "clusterqueues", _kueue("clusterqueues"), field_selector=f"metadata.name={cluster_queue}")
    if not found:
        raise UserError(f"no ClusterQueue {cluster_queue}")
    status = found[0].get("status") or {}
    total = borrowed = 0
    for flavor in status.get("flavorsUsage") or []:
        for res in flavor.get("resources") or []:
            if res["name"] == GPU_RESOURCE:
                total += int(res.get("total", "0"))
                borrowed += int(res.get("borrowed", "0"))
    return {"total": total, "borrowed": borrowed}


def wait_gpu_usage(kube: Any, cluster_queue: str, namespace: str, want: dict[str, int], what: str,
                   timeout: float = 90) -> dict[str, int]:
    """Wait for ClusterQueue `cluster_queue`'s GPU usage (Kueue's status, written after it admits or
    finishes a workload) to be WANT; on a timeout the error holds the queue's whole usage and each of
    NAMESPACE's Workloads with its conditions, so a lagging status and a wrong admission read apart."""
    def explain() -> dict[str, Any]:
        found = _list(kube, "clusterqueues", _kueue("clusterqueues"), field_selector=f"metadata.name={cluster_queue}")
        status = (found[0].get("status") or {}) if found else {}
        return {"flavorsUsage": status.get("flavorsUsage"),
                "admittedWorkloads": status.get("admittedWorkloads"),
                "workloads": {w["metadata"]["name"]: conditions(w)
                              for w in _list(kube, f"workloads/{namespace}", _kueue("workloads", namespace))}}

    wait_until(lambda: gpu_usage(kube, cluster_queue) == want, what, timeout=timeout, explain=explain)
    return want


# -- room on the GPU pool (teams.kueue.topologyAware's test) ------------------------------------------


@contextlib.contextmanager
def tainted(kube: Any, node: str) -> Iterator[None]:
    """NODE tainted with BUSY_TAINT (no TrainJob tolerates it) while the context runs."""
    taint = f"{BUSY_TAINT['key']}={BUSY_TAINT['value']}:{BUSY_TAINT['effect']}"
    kube.kubectl("taint", "node", node, taint, "--overwrite")
    try:
        yield
    finally:
        kube.kubectl("taint", "node", node, f"{BUSY_TAINT['key']}-", check=False)


def free_memory(kube: Any, node: str) -> int:
    """NODE's allocatable memory less what its pods request, in bytes."""
    allocatable = quantity.parse(kube.kubectl_json("get", "node", node)["status"]["allocatable"]["memory"])
    pods_on = kube.kubectl_json("get", "pods", "-A", "--field-selector", f"spec.nodeName={node}")["items"]
    used = sum(quantity.parse(dig(c, "resources", "requests", "memory", default="0"))
               for p in pods_on if dig(p, "status", "phase") not in ("Succeeded", "Failed")
               for c in p["spec"]["containers"])
    return int(allocatable - used)


@contextlib.contextmanager
def filled(kube: Any, node: str, runtime: dict[str, Any], pods_left: int) -> Iterator[None]:
    """A pod outside Kueue bound to NODE (the GPU taint tolerated) asks for the node's free memory but
    room for PODS_LEFT (and a half) pods of RUNTIME's node step, while the context runs."""
    step = next(rj for rj in runtime["spec"]["template"]["spec"]["replicatedJobs"] if rj["name"] == "node")
    container = step["template"]["spec"]["template"]["spec"]["containers"][0]
    per_pod = quantity.parse(container["resources"]["requests"]["memory"])
    ask = free_memory(kube, node) - int(per_pod * pods_left + per_pod / 2)
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": FILLER, "namespace": "default"},
           "spec": {"nodeName": node, "tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": "filler", "image": container["image"],
                                    "resources": {"requests": {"memory": str(ask)}}}]}}
    kube.kubectl("create", "-f", "-", input_text=yaml.safe_dump(pod))
    try:
        wait_until(lambda: dig(kube.kubectl_json("get", "pod", FILLER, "-n", "default"), "status", "phase") == "Running",
                   f"{FILLER} Running on {node}")
        yield
    finally:
        kube.kubectl("delete", "pod", FILLER, "-n", "default", "--wait=true", "--ignore-not-found", timeout=120)


def hold_for(read: Callable[[], Any], seconds: float, interval: float = 2.0) -> list[Any]:
    """READ's value every INTERVAL for SECONDS (what stays true while nothing changes)."""
    seen = []
    deadline = time.monotonic() + seconds
    while True:
        seen.append(read())
        if time.monotonic() >= deadline:
            return seen
        time.sleep(interval)


def topology_assignment(wl: dict[str, Any] | None) -> list[str]:
    """The node Kueue assigned to each pod of a Workload's PodSets (its `topologyAssignment`), one entry per pod."""
    nodes: list[str] = []
    for psa in dig(wl, "status", "admission", "podSetAssignments") or []:
        topology = psa.get("topologyAssignment") or {}
        level = (topology.get("levels") or []).index(HOSTNAME_LEVEL)
        for piece in topology.get("slices") or []:
            values = piece["valuesPerLevel"][level]
            count = piece["domainCount"]
            if "universal" in values:
                names = [values["universal"]] * count
            else:
                ind = values["individual"]
                names = [f"{ind.get('prefix') or ''}{root}{ind.get('suffix') or ''}" for root in ind["roots"]]
            pods_per = piece["podCounts"]
            counts = pods_per["individual"] if "individual" in pods_per else [pods_per["universal"]] * count
            for name, n in zip(names, counts, strict=True):
                nodes.extend([name] * n)
    return nodes
