"""overlays/argocd: the AppProject, ApplicationSet, plugin and Argo CD install Component are
valid for the pinned Argo CD, permit exactly what the environments render, and the TrainJob and
JobSet health checks give the right status when run by a real Lua 5.1 interpreter."""

from __future__ import annotations

import pytest

from conftest import ROOT

ARGOCD = ROOT / "overlays" / "argocd"
HEALTH = ARGOCD / "install" / "health"
HEALTH_KEYS = {
    "resource.customizations.health.trainer.kubeflow.org_TrainJob": HEALTH / "trainjob.lua",
    "resource.customizations.health.jobset.x-k8s.io_JobSet": HEALTH / "jobset.lua",
}
# ----------------------------------------------------------------------------- health checks in Lua 5.1
def lua_health(script: str, obj: dict) -> dict:
    """Run an Argo CD health script the way Argo CD does: Lua 5.1 (gopher-lua), the object as the
    global `obj`, only the base and table libraries (util/lua/lua.go), a table returned."""
    from lupa import lua51

    runtime = lua51.LuaRuntime(unpack_returned_tuples=False)

    def to_lua(value):
        if isinstance(value, dict):
            table = runtime.table()
            for key, item in value.items():
                if item is not None:
                    table[key] = to_lua(item)
            return table
        if isinstance(value, list):
            return runtime.table(*[to_lua(item) for item in value])
        return value

    run = runtime.eval("""function(script, obj)
        local env = { obj = obj, table = table }
        for _, name in ipairs({"assert", "error", "ipairs", "next", "pairs", "pcall", "select", "tonumber",
                               "tostring", "type", "unpack", "xpcall", "rawequal", "rawget", "rawset",
                               "setmetatable", "getmetatable"}) do env[name] = _G[name] end
        env._G = env
        local fn = assert(loadstring(script, "health.lua"))
        setfenv(fn, env)
        return fn()
    end""")
    result = run(script, to_lua(obj))
    assert result is not None
    health = {key: result[key] for key in ("status", "message") if result[key] is not None}
    assert health["status"] in {"Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown"}
    return health


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


@pytest.mark.parametrize("case", sorted(TRAINJOB_CASES))
def test_trainjob_health(case):
    obj, status, message = TRAINJOB_CASES[case]
    assert lua_health(HEALTH_KEYS["resource.customizations.health.trainer.kubeflow.org_TrainJob"].read_text(),
                      obj) == {"status": status, "message": message}


@pytest.mark.parametrize("case", sorted(JOBSET_CASES))
def test_jobset_health(case):
    obj, status, message = JOBSET_CASES[case]
    assert lua_health(HEALTH_KEYS["resource.customizations.health.jobset.x-k8s.io_JobSet"].read_text(),
                      obj) == {"status": status, "message": message}


def test_lua_sandbox_is_as_narrow_as_argocds():
    """A script using the string library (absent in Argo CD's health VM) fails here too."""
    with pytest.raises(Exception, match="string"):
        lua_health('return { status = string.format("%s", "Healthy") }', trainjob())
