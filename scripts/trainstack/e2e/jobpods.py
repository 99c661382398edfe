"""The pods of a TrainJob the e2e trains (a JobSet's, in the smoke namespace): each pod's facts, why a job did not
complete, and the log of a pod's first failed container, kept the moment its restart count goes to 1.

The kubelet keeps the log of one container before the current one only. When a rank's first container fails,
its restarts can go on failing for other reasons (the other ranks gone, the rendezvous refused), and by the time
the TrainJob times out the first failure's log, the one that says why, has been replaced. `FirstFailures.check`
runs at every poll of the wait (the Kubeflow SDK's `wait_for_job_status` callbacks) and reads that log while the
kubelet still has it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .. import kubeapi
from ..errors import UserError
from ..jsontypes import dig
from .base import SMOKE_NS

CONTAINER = "node"  # the trainer's container in the golden runtimes
TAIL = 40  # lines kept of each first failure's log


def pods_of(kube: Any, name: str, namespace: str = SMOKE_NS) -> list[dict[str, Any]]:
    api = kubeapi.for_kube(kube)
    return kubeapi.items(api, kubeapi.resource(api, "pods", namespace), label_selector=f"jobset.sigs.k8s.io/jobset-name={name}")


def pod_facts(pod: dict[str, Any]) -> dict[str, Any]:
    """A pod as the e2e reads it: its index in its Job (the node rank), node, pod IP, phase, and the trainer
    container's (CONTAINER) exit code and container ID."""
    status = pod.get("status") or {}
    containers = {c["name"]: c for c in status.get("containerStatuses") or []}
    main: dict[str, Any] = containers.get(CONTAINER) or next(iter(containers.values()), {})
    ended = dig(main, "state", "terminated") or {}
    index = dig(pod["metadata"], "labels", "batch.kubernetes.io/job-completion-index")
    scheduled = next((c.get("lastTransitionTime") for c in status.get("conditions") or []
                      if c.get("type") == "PodScheduled" and c.get("status") == "True"), None)
    return {"pod": pod["metadata"]["name"], "hostname": pod["spec"].get("hostname"),
            "index": int(index) if index is not None else None,
            "node": pod["spec"].get("nodeName"), "ip": status.get("podIP"), "scheduled_at": scheduled,
            "pod_group": dig(pod["spec"], "schedulingGroup", "podGroupName"),
            "image": next((c.get("image") for c in pod["spec"].get("containers", []) if c.get("name") == CONTAINER), None),
            "phase": status.get("phase"), "exit_code": ended.get("exitCode"), "container_id": main.get("containerID")}


def ended_after(pods: list[dict[str, Any]], since: datetime) -> bool:
    """Whether every container of PODS has ended, and each at SINCE or later: the containers outlived what
    happened at SINCE (a node daemon's restart). finishedAt is whole seconds, rounded down, so a container that
    ended after SINCE shows SINCE's second or a later one."""
    statuses = [c for p in pods for c in dig(p, "status", "containerStatuses") or []]
    ended = [dig(c, "state", "terminated", "finishedAt") for c in statuses]
    floor = since.replace(microsecond=0)
    return bool(ended) and all(e and datetime.fromisoformat(e) >= floor for e in ended)


def why_not_complete(kube: Any, name: str, err: BaseException) -> str:
    """One line on a TrainJob that did not reach Complete: what the SDK said, then each pod's phase, node,
    exit code and reason, and the last log line of each container that ended non-zero (what a person
    debugging it reads first; the artifacts hold the rest)."""
    parts = [str(err).splitlines()[0][:300] if str(err) else type(err).__name__]
    try:
        pods = pods_of(kube, name)
    except (UserError, OSError) as read_err:
        return f"{parts[0]} (its pods could not be read: {read_err})"
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        facts = pod_facts(pod)
        statuses = dig(pod, "status", "containerStatuses") or []
        ended = next((dig(c, "state", "terminated") or dig(c, "lastState", "terminated") or {}
                      for c in statuses if c.get("name") == CONTAINER), {})
        line = f"{facts['pod']} on {facts['node']}: {facts['phase']}"
        if ended:
            line += f" exit {ended.get('exitCode')} ({ended.get('reason', '')})"
            if ended.get("exitCode"):
                try:
                    logs = kube.kubectl("logs", facts["pod"], "-n", SMOKE_NS, "-c", CONTAINER, "--tail", "3",
                                        check=False).stdout.strip().splitlines()
                except UserError:
                    logs = []
                if logs:
                    line += f": {logs[-1][:300]}"
        parts.append(line)
    return "; ".join(parts)


def restarted(pod: dict[str, Any]) -> dict[str, Any] | None:
    """POD's `node` container status when it has restarted at least once, else None."""
    for status in dig(pod, "status", "containerStatuses") or []:
        if status.get("name") == CONTAINER and (status.get("restartCount") or 0) >= 1:
            return status
    return None


class FirstFailures:
    """For each pod of one job: its first failed container's exit code, reason and last log lines."""

    def __init__(self, kube: Any, namespace: str, pods: Any) -> None:
        self.kube, self.namespace, self.pods = kube, namespace, pods  # pods(): the job's pods, read anew
        self.found: dict[str, dict[str, Any]] = {}

    def check(self, *_: Any) -> None:
        """Read the previous container's log of every pod that restarted since the last check (once per pod)."""
        try:
            pods = self.pods()
        except (UserError, OSError):
            return  # the next poll reads them again
        for pod in pods:
            name = pod["metadata"]["name"]
            status = restarted(pod)
            if status is None or name in self.found:
                continue
            ended = dig(status, "lastState", "terminated") or {}
            try:
                log = self.kube.kubectl("logs", name, "-n", self.namespace, "-c", CONTAINER, "--previous",
                                        "--tail", str(TAIL), check=False).stdout
            except UserError as err:
                log = f"(its log could not be read: {err})"
            self.found[name] = {"exit_code": ended.get("exitCode"), "reason": ended.get("reason", ""),
                                "restarts": status.get("restartCount"), "log": log.strip().splitlines()}

    def summary(self) -> str:
        """One line per pod that failed once: exit code and the last line of its first failed container."""
        return "; ".join(f"{pod}'s first container ended with exit {f['exit_code']} ({f['reason']}): "
                         f"{(f['log'] or ['(no log)'])[-1][:300]}" for pod, f in sorted(self.found.items()))
