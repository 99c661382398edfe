"""A real node lost while a two-node TrainJob trains: what the platform does, measured.

`node_lost` submits examples/train_ddp.py on `torch-distributed` with two nodes through the Kubeflow
SDK (a checkpoint every EVERY steps, `--resume`, a COLLECTIVE_TIMEOUT s collective timeout), waits
until its pods run on two real nodes and rank 0 has passed a checkpoint, then loses the further
node that runs one of them (`RealNode.lose`: its link cut first, so nothing it sends gets out, then
every process of the node killed, containers included). It follows the Node, the pods and the
TrainJob: when the node goes NotReady (the node controller's grace period), when its pod is evicted
(the runtime's `nodeLostSeconds`), and how the TrainJob ends: resumed from its checkpoint on the
nodes left, or Failed with its reason. The lost node's evicted pod stays Terminating (no kubelet
confirms its end) and the Job declares itself done only once it is gone: the node rejoins
(`RealNode.rejoin`) when the job's other pods have finished, its kubelet ends the pod, and the
TrainJob ends; the node is Ready again with nothing of the job left on it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from .. import kubeapi
from ..errors import UserError
from ..jsontypes import dig
from .base import GROUP, SMOKE_NS, VERSION, terminal_state
from .jobpods import pod_facts, pods_of
from .realnode import OUTPUT, client, events, submit

STEPS = 3000
EVERY = 50
COLLECTIVE_TIMEOUT = 45


@dataclass
class NodeLoss:
    """What happened, in seconds from the moment the node was lost."""

    job: str
    node: str
    state: str = ""  # Complete | Failed | "" (neither within the timeout)
    reason: str = ""
    not_ready_s: float | None = None
    evicted_s: float | None = None
    ended_s: float | None = None
    work_done_s: float | None = None  # every pod of the job on the nodes left had finished
    rejoined_s: float | None = None
    resumed_from: int | None = None
    pods_before: list[dict[str, Any]] = field(default_factory=list)
    pods_after: list[dict[str, Any]] = field(default_factory=list)
    left_on_node: list[str] = field(default_factory=list)
    node_log: str = ""  # the victim's kubelet's last error lines, when it did not rejoin


def _ready(node: dict[str, Any] | None) -> str:
    for cond in dig(node, "status", "conditions") or []:
        if cond.get("type") == "Ready":
            return str(cond.get("status"))
    return ""


def _rank0_step(kube: Any, name: str) -> int:
    pods = [p for p in pods_of(kube, name) if "-node-0-0" in p["metadata"]["name"]
            and dig(p, "status", "phase") == "Running"]
    if not pods:
        return 0
    out = kube.kubectl("logs", pods[0]["metadata"]["name"], "-n", SMOKE_NS, "--tail=3", check=False).stdout
    steps = [int(r["step"]) for r in events(out.splitlines(), "step")]
    return max(steps, default=0)


def node_lost(kube: Any, kubeconfig: Any, nodes: list[Any], timeout: float = 480) -> NodeLoss:
    """Lose the further real node under a training two-node TrainJob; see the module's docstring."""
    further = {n.name: n for n in nodes if n.sandbox.parent is not None}
    if not further:
        raise UserError("the node-loss fault needs a second real node (trainstack e2e --real-nodes 2)")
    kube.kubectl("create", "namespace", SMOKE_NS, check=False)
    name = submit(kubeconfig, ["--steps", str(STEPS), "--seed", "3", "--output-dir", OUTPUT, "--checkpoint-every",
                               str(EVERY), "--resume", "--collective-timeout", str(COLLECTIVE_TIMEOUT)])
    api = kubeapi.for_kube(kube)
    deadline = time.monotonic() + timeout
    while True:  # both pods running, one of them on a further node, and a checkpoint written
        running = [pod_facts(p) for p in pods_of(kube, name) if dig(p, "status", "phase") == "Running"]
        on_further = [f for f in running if f["node"] in further]
        if len(running) == 2 and on_further and _rank0_step(kube, name) > EVERY:
            break
        if time.monotonic() > deadline:
            raise UserError(f"node-loss fault: TrainJob {name} did not run on a further real node past step {EVERY} "
                            f"within {timeout:.0f}s (running: {[(f['pod'], f['node']) for f in running]})")
        time.sleep(0.5)
    victim = further[on_further[0]["node"]]
    result = NodeLoss(job=name, node=victim.name, pods_before=running)
    lost_at = time.monotonic()
    victim.lose()
    trainjobs = kubeapi.custom_objects(api, GROUP, VERSION, "trainjobs", SMOKE_NS)
    deadline = lost_at + timeout
    while time.monotonic() < deadline:  # NotReady, the eviction, and the job's work done on the nodes left
        now = round(time.monotonic() - lost_at, 1)
        pods = pods_of(kube, name)
        if result.not_ready_s is None and _ready(kubeapi.named(api, kubeapi.core_objects(api, "nodes"),
                                                               victim.name)) != "True":
            result.not_ready_s = now
        if result.evicted_s is None and any(p["metadata"].get("deletionTimestamp") and
                                            p["spec"].get("nodeName") == victim.name for p in pods):
            result.evicted_s = now
        state, reason = terminal_state(kubeapi.named(api, trainjobs, name))
        if state:
            result.state, result.reason, result.ended_s = state, reason, now
            break
        # Every pod of the job on the nodes left has finished: what remains is the lost node's pod, which the
        # Job waits for before it declares itself done (a terminating pod counts until it is gone)
        live = [p for p in pods if p["spec"].get("nodeName") != victim.name]
        if result.evicted_s is not None and live and all(dig(p, "status", "phase") in
                                                         ("Succeeded", "Failed") for p in live):
            result.work_done_s = now
            break
        time.sleep(1)
    result.pods_after = sorted((pod_facts(p) for p in pods_of(kube, name)), key=lambda f: f["pod"])
    victim.rejoin()
    rejoined_at = time.monotonic()
    while time.monotonic() < rejoined_at + 180:  # Ready again, the lost pod gone from it, the job ended
        node = kubeapi.named(api, kubeapi.core_objects(api, "nodes"), victim.name)
        left = [p["metadata"]["name"] for p in pods_of(kube, name) if p["spec"].get("nodeName") == victim.name
                and p["metadata"].get("deletionTimestamp")]
        if not result.state:
            state, reason = terminal_state(kubeapi.named(api, trainjobs, name))
            if state:
                result.state, result.reason, result.ended_s = state, reason, round(time.monotonic() - lost_at, 1)
        if _ready(node) == "True" and not left and result.rejoined_s is None:
            result.rejoined_s = round(time.monotonic() - lost_at, 1)
        result.left_on_node = left
        if result.rejoined_s is not None and result.state:
            break
        time.sleep(1)
    if result.state == "Complete":
        starts = events(list(client(kubeconfig).get_job_logs(name)), "start")
        if starts and starts[-1].get("resumed"):
            result.resumed_from = int(starts[-1].get("start_step") or 0)
    if result.rejoined_s is None:
        result.node_log = f"kubelet: {victim.log_tail('kubelet', 3)}; containerd: {victim.log_tail('containerd', 2)}"
    kube.kubectl("delete", "trainjob", name, "-n", SMOKE_NS, "--wait=false", check=False)
    return result
