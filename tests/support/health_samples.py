"""Sample TrainJobs and JobSets, with the health Argo CD should report for each: the cases of the
health Lua scripts, checked offline (unit) and against the pinned CRDs (chart)."""

from __future__ import annotations


def condition(kind: str, status: str = "True", reason: str = "", message: str = "") -> dict:
    return {"type": kind, "status": status, "reason": reason or kind, "message": message,
            "lastTransitionTime": "2026-01-01T00:00:00Z"}


def trainjob(status: dict | None = None, suspend: bool | None = None) -> dict:
    obj = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
           "metadata": {"name": "mnist", "namespace": "team-a"},
           "spec": {"runtimeRef": {"name": "torch-distributed"}}}
    if suspend is not None:
        obj["spec"]["suspend"] = suspend
    if status is not None:
        obj["status"] = status
    return obj


def jobset(status: dict | None = None, suspend: bool | None = None) -> dict:
    obj = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
           "metadata": {"name": "mnist", "namespace": "team-a"},
           "spec": {"replicatedJobs": [{"name": "node", "replicas": 1, "template": {"spec": {"template": {
               "spec": {"containers": [{"name": "node", "image": "docker.io/pytorch/pytorch:2"}]}}}}}]}}
    if suspend is not None:
        obj["spec"]["suspend"] = suspend
    if status is not None:
        obj["status"] = status
    return obj


JOBS = [{"name": "node", "ready": 2, "succeeded": 0, "failed": 0, "active": 2, "suspended": 0}]
TRAINJOB_CASES = {
    "new": (trainjob(), "Progressing", "Waiting for the TrainJob to start"),
    "running": (trainjob({"conditions": [condition("Suspended", "False", "Resumed")], "jobsStatus": JOBS}),
                "Progressing", "TrainJob is running: 2 active, 0 succeeded, 0 failed jobs"),
    "complete": (trainjob({"conditions": [condition("Complete", message="jobset completed")]}),
                 "Healthy", "jobset completed"),
    "failed": (trainjob({"conditions": [condition("Failed", reason="DeadlineExceeded", message="")]}),
               "Degraded", "DeadlineExceeded"),
    "failed wins over complete": (trainjob({"conditions": [condition("Complete"), condition("Failed", message="boom")]}),
                                  "Degraded", "boom"),
    "suspended by kueue": (trainjob({"conditions": [condition("Suspended", message="TrainJob is suspended")]},
                                    suspend=True), "Suspended", "TrainJob is suspended"),
    "created suspended": (trainjob(suspend=True), "Suspended",
                          "TrainJob is suspended (waiting to be admitted, e.g. by Kueue)"),
    "complete after resume": (trainjob({"conditions": [condition("Suspended", "False", "Resumed"),
                                                       condition("Complete", message="done")]}), "Healthy", "done"),
}
JOBSET_CASES = {
    "new": (jobset(), "Progressing", "Waiting for the JobSet to start"),
    "running": (jobset({"restarts": 1, "replicatedJobsStatus": [
        {"name": "node", "ready": 1, "succeeded": 0, "failed": 0, "active": 1, "suspended": 0}]}),
        "Progressing", "JobSet is running: 1 ready, 1 active jobs, 1 restarts"),
    "startup policy": (jobset({"conditions": [condition("StartupPolicyInProgress", message="in order")]}),
                       "Progressing", "Waiting for the JobSet to start"),
    "restarting": (jobset({"conditions": [condition("RestartingJobSet", message="restarting")]}),
                   "Progressing", "restarting"),
    "completed": (jobset({"terminalState": "Completed", "conditions": [condition("Completed", message="jobs done")]}),
                  "Healthy", "jobs done"),
    "failed": (jobset({"terminalState": "Failed", "conditions": [condition("Failed", message="node-0 failed")]}),
               "Degraded", "node-0 failed"),
    "failed, terminal state only": (jobset({"terminalState": "Failed"}), "Degraded", "JobSet failed"),
    "suspended by kueue": (jobset({"conditions": [condition("Suspended", message="jobset is suspended")]},
                                  suspend=True), "Suspended", "jobset is suspended"),
    "created suspended": (jobset(suspend=True), "Suspended",
                          "JobSet is suspended (waiting to be admitted, e.g. by Kueue)"),
    "resumed": (jobset({"conditions": [condition("Suspended", "False", "ResumeJobs")]}, suspend=False),
                "Progressing", "Waiting for the JobSet to start"),
}
