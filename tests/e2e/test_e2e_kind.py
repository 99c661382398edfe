"""`trainstack e2e --provider kind` on this host: kind's own CLI creates three nodes as containers of the private
Docker engine (no engine answers here, so the provider takes the assembled path), the chart is installed with the
pinned helm, the smoke TrainJobs run as real pods on the kind workers, and the host is left as it was."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import run_cli
from trainstack.cluster import kindnode

from .test_e2e_local import assert_same_rules, kubeconfig_state, processes_mentioning, trainstack_sandboxes

pytestmark = pytest.mark.e2e

# the globals a privileged node would write on the host: kubelet's tunables, systemd's, procps' vendor files
HOST_SYSCTLS = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
                "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes", "fs/file-max", "fs/nr_open",
                "fs/protected_regular", "fs/protected_fifos", "fs/protected_hardlinks", "fs/protected_symlinks")


def host_state() -> dict[str, object]:
    mounts = Path("/proc/self/mountinfo").read_text()
    return {
        "sysctls": {k: Path("/proc/sys", k).read_text() for k in HOST_SYSCTLS if Path("/proc/sys", k).exists()},
        "ip_forward": Path("/proc/sys/net/ipv4/ip_forward").read_text(),
        "lib_modules": Path("/usr/lib/modules").exists(),
        "links": sorted(p.name for p in Path("/sys/class/net").iterdir()),
        "mounts": [ln for ln in mounts.splitlines() if "trainstack" in ln or "docker" in ln],
    }


def test_kind_e2e_runs_on_three_kind_nodes_and_leaves_the_host_as_it_was(tmp_path):
    before = host_state()
    iptables = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
    user_kubeconfig = kubeconfig_state()
    summary = tmp_path / "summary.json"
    try:
        result = run_cli("e2e", "--provider", "kind", "--env", "dev", env={"TRAINSTACK_E2E_SUMMARY": str(summary)},
                         timeout=1800)
    finally:
        run_cli("e2e", "down")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-3000:]
    report = json.loads(summary.read_text())
    assert report["provider"] == "kind"
    steps = {s["step"]: s for s in report["steps"]}
    for name in ("cluster (kind)", "helm install", "CRDs established", "controllers and webhooks ready",
                 "smoke TrainJobs Complete", "JobSets and Jobs created", "pod placement",
                 "helm uninstall keeps CRDs and TrainJobs"):
        assert steps[name]["result"] == "pass", (name, steps[name])
    cluster = steps["cluster (kind)"]["data"]
    # three kind nodes whose kubelets are the lock's (the assembled node image), not KWOK's
    assert cluster["kind"]["nodes"] == ["trainstack-e2e-control-plane", "trainstack-e2e-worker",
                                        "trainstack-e2e-worker2"], cluster
    assert cluster["kind"]["node_image"].startswith(kindnode.REPOSITORY + ":"), cluster
    assert len(cluster["kubeletVersions"]) == 1, cluster
    # the chart's controllers ran as pods on the kind nodes
    controllers = steps["controllers and webhooks ready"]["data"]["pods_on_nodes"]
    assert controllers and all(nodes and all(n.startswith("trainstack-e2e-") for n in nodes)
                               for nodes in controllers.values()), controllers
    # every CPU golden runtime's smoke job ran real pods on kind nodes; GPU ones are skipped with the reason
    jobs = {j["job"]: j for j in steps["smoke TrainJobs Complete"]["data"]["jobs"]}
    assert {"torch", "jax", "xgboost"} <= set(jobs), jobs
    assert all(j["real"] and all(n.startswith("trainstack-e2e-") for n in j["nodes"]) for j in jobs.values()), jobs
    skipped = steps["smoke TrainJobs Complete"]["data"]["skipped"]
    assert skipped and set(skipped.values()) == {"kind has no GPU nodes"}, skipped
    # the host: sysctls, iptables, links, mounts and /usr/lib as before; no engine process, namespace or cgroup
    assert host_state() == before
    assert_same_rules(iptables, subprocess.run(["iptables-save"], capture_output=True, text=True).stdout)
    assert trainstack_sandboxes("trainstack-kind-") == []
    assert processes_mentioning("dockerd") == [] and processes_mentioning(report["run_dir"] + "/") == []
    assert kubeconfig_state() == user_kubeconfig
