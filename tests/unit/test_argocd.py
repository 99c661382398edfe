"""overlays/argocd: the AppProject, ApplicationSet, plugin and Argo CD install Component are
valid for the pinned Argo CD, permit exactly what the environments render, and the TrainJob and
JobSet health checks give the right status when run by a real Lua 5.1 interpreter."""

from __future__ import annotations

import pytest

from conftest import ROOT
from support.health_samples import JOBSET_CASES, TRAINJOB_CASES, trainjob

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
