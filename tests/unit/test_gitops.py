"""`trainstack e2e --gitops`: the real Argo CD (pinned, built from its module) syncs the platform from a
git repository of this checkout onto the local cluster's real node. One cluster for the module: the
suite's steps run once, in order (each needs the ones before); each test checks what one step proved,
from the cluster and Argo CD's own status, not from the step's prose.

Needs `make setup-gitops` (Argo CD is not in `make setup`, which `make e2e` needs; `make test` and
`make test-e2e` build it, see docs/gitops.md); without the Argo CD binary the module is skipped, saying so.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from support.cli import run_cli
from trainstack import lock as lockmod
from trainstack import tools
from trainstack.e2e import gitops as gitopsmod

ROOT = Path(__file__).resolve().parents[2]

def test_argocd_builds_through_a_wrapper_with_upstreams_versioned_replaces_and_the_pinned_toolchain():
    lock = lockmod.load(ROOT / "trainstack.lock.yaml")
    tool = lock.tool("argocd")
    assert tool.go_toolchain.startswith("go1.27.") and tool.copy_replaces
    assert dict(tool.requires) == {"github.com/argoproj/argo-cd/gitops-engine/v3": tool.version}
    assert tool.version == lock.source("argocd").version  # one pin: the CRDs and the binary agree
    env = {**os.environ, "GOTOOLCHAIN": tool.go_toolchain, "GOFLAGS": "-mod=mod"}
    go_mod = tools.module_info(tool.module, tool.version, env)["GoMod"]
    replaces = tools._upstream_replaces(go_mod, env)
    assert "-replace=k8s.io/client-go=k8s.io/client-go@v0.37.0" in replaces
    assert not [r for r in replaces if "gitops-engine" in r]  # the local-path one is replaced by `require`
    # a tier of its own: `trainstack tools install` (make setup) leaves it to make setup-gitops
    assert tool.tier == "gitops"
    assert "argocd" not in [t.name for t in tools.selected(None, lock)]
    assert [t.name for t in tools.selected(["argocd"], lock)] == ["argocd"]


@pytest.mark.parametrize(("args", "fragment"), [
    (["--provider", "kind"], "--gitops runs on --provider local"),
    (["--nodes", "kwok"], "--gitops runs on the real node"),
    (["--data-cache"], "cannot be combined"),
])
def test_gitops_refuses_what_it_cannot_run_in_one_line(args, fragment):
    result = run_cli("e2e", "--gitops", *args, timeout=120)
    assert result.returncode == 2
    lines = [ln for ln in result.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and fragment in lines[0], result.stderr


def test_renders_are_read_from_the_repo_servers_log(tmp_path):
    """What the live tests count: the repo-server's "manifest cache miss" entries for one Application (a log
    as argocd-repo-server v3.6 writes it, one JSON object a line); cache hits and other apps do not count."""
    import json

    argocd = gitopsmod.ArgoCD.__new__(gitopsmod.ArgoCD)
    argocd.dir = tmp_path
    (tmp_path / "logs").mkdir()
    lines = [
        {"application": "trainstack-dev-local", "level": "info", "msg": "manifest cache miss"},
        {"application": "trainstack-dev-local", "level": "info", "msg": "manifest cache hit"},
        {"application": "trainstack-e2e-jobs", "level": "info", "msg": "manifest cache miss"},
        {"grpc.method": "GenerateManifest", "grpc.code": "OK"},
        {"application": "trainstack-dev-local", "level": "info", "msg": "manifest cache miss"},
    ]
    (tmp_path / "logs" / "argocd-repo-server.log").write_text(
        "\n".join([json.dumps(e) for e in lines] + ["not json"]) + "\n")
    assert argocd.renders("trainstack-dev-local") == 2
    assert argocd.renders("trainstack-e2e-jobs") == 1
    assert argocd.renders("other") == 0


def test_a_timed_out_wait_says_why_each_platform_pod_is_not_ready():
    from trainstack.e2e.base import unready_pods

    def pod(name, phase, conditions, containers=()):
        return {"metadata": {"name": name}, "status": {"phase": phase, "conditions": conditions,
                                                        "containerStatuses": list(containers)}}

    ready = [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}]
    unready = [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "False"}]
    pods = [
        pod("ok", "Running", ready, [{"name": "c", "ready": True, "state": {"running": {}}}]),
        pod("done", "Succeeded", unready),
        pod("pending", "Pending", [{"type": "PodScheduled", "status": "False",
                                    "message": "0/1 nodes are available: 1 Insufficient cpu."}]),
        pod("pull", "Pending", unready, [{"name": "manager", "restartCount": 0,
                                          "state": {"waiting": {"reason": "ImagePullBackOff", "message": "not found"}}}]),
        pod("crash", "Running", unready, [{"name": "controller", "restartCount": 4,
                                           "state": {"terminated": {"reason": "Error", "exitCode": 1}}}]),
        pod("probe", "Running", unready, [{"name": "controller", "ready": False, "state": {"running": {}}}]),
        pod("oom", "Running", unready, [{"name": "server", "restartCount": 3, "lastState": {"terminated": {
            "reason": "OOMKilled", "exitCode": 137}}, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]),
    ]
    assert unready_pods(pods) == [
        "pending: not scheduled: 0/1 nodes are available: 1 Insufficient cpu.",
        "pull: Pending: manager waiting ImagePullBackOff: not found",
        "crash: Running: controller terminated Error exit 1, 4 restarts",
        "probe: Running: controller running, not ready",
        "oom: Running: server waiting CrashLoopBackOff, 3 restarts (last: OOMKilled exit 137)",
    ]
