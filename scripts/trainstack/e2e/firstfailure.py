"""The log of a training pod's first failed container, kept the moment its restart count goes to 1.

The kubelet keeps the log of one container before the current one only. When a rank's first container fails,
its restarts can go on failing for other reasons (the other ranks gone, the rendezvous refused), and by the time
the TrainJob times out the first failure's log, the one that says why, has been replaced. `FirstFailures.check`
runs at every poll of the wait (the Kubeflow SDK's `wait_for_job_status` callbacks) and reads that log while the
kubelet still has it.
"""

from __future__ import annotations

from typing import Any

from ..errors import UserError

CONTAINER = "node"  # the trainer's container in the golden runtimes
TAIL = 40  # lines kept of each first failure's log


def restarted(pod: dict[str, Any]) -> dict[str, Any] | None:
    """POD's `node` container status when it has restarted at least once, else None."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
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
            ended = (status.get("lastState") or {}).get("terminated") or {}
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
