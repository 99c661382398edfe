"""`trainstack e2e --provider kind` on this host: kind's own CLI creates three nodes as containers of the private
Docker engine (no engine answers here, so the provider takes the assembled path), the chart is installed with the
pinned helm, the smoke TrainJobs run as real pods on the kind workers, and the host is left as it was."""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import ROOT
from support.cli import run_cli
from trainstack import paths
from trainstack.cluster import kind, kindnode
from trainstack.cluster import sandbox as sandboxmod

from .test_e2e_local import assert_same_rules, kubeconfig_state, processes_mentioning, trainstack_sandboxes

pytestmark = pytest.mark.e2e
# In the second real-node group (tests/e2e/conftest.py): its cluster is in namespaces of its own, and it leaves
# the first group's clusters alone: no `e2e down` (which removes kept clusters), only its own leftovers.
REAL_NODE_GROUP = 2


def remove_own_leftovers() -> None:
    """What `e2e down` does, for kind's sandboxes only: those a dead run left, and their engines' data."""
    for box in sandboxmod.stale():
        if box.netns.startswith(f"{sandboxmod.PREFIX}kind-"):
            box.destroy(timeout=15)
    kind.remove_leftovers()

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
        # (the other e2e groups' clusters come and go meanwhile: only what the kind run could leave is compared)
        "mounts": [ln for ln in mounts.splitlines() if any(w in ln for w in ("trainstack-kind", "docker", "/usr/lib"))],
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
        remove_own_leftovers()
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-3000:]
    report = json.loads(summary.read_text())
    assert report["provider"] == "kind"
    # each step of the summary says the provider it ran on
    assert {s["provider"] for s in report["steps"]} == {"kind"}
    steps = {s["step"]: s for s in report["steps"]}
    for name in ("cluster (kind)", "helm install", "CRDs established", "controllers and webhooks ready",
                 "helm test", "smoke TrainJobs Complete", "JobSets and Jobs created", "pod placement",
                 "SDK TrainJob trains across real nodes", "checkpoint outlives the pods", "worker killed mid-run",
                 "SDK JAX TrainJob trains across real nodes", "SDK XGBoost TrainJob trains across real nodes",
                 "SDK MLX TrainJob trains across real nodes over MPI", "image policy on ':latest'",
                 "failing pod ends TrainJob Failed", "helm uninstall keeps CRDs and TrainJobs", "teardown"):
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
    # torch, JAX and XGBoost trained across the two kind workers: a pod on each, exit 0, each pod's IP in its
    # node's pod subnet (the provider's CNI), rank 1 reached rank 0's pod on the other node, and the gradients
    # crossed the workers' links (their eth0 counters)
    workers = {"trainstack-e2e-worker", "trainstack-e2e-worker2"}
    trained = steps["SDK TrainJob trains across real nodes"]["data"]
    assert {p["node"] for p in trained["pods"]} == workers, trained["pods"]
    assert all(p["phase"] == "Succeeded" and p["exit_code"] == 0 and
               ipaddress.ip_address(p["ip"]) in ipaddress.ip_network(p["node_pod_cidr"]) for p in trained["pods"])
    assert trained["rendezvous"]["master_ip"] == next(p["ip"] for p in trained["pods"] if p["index"] == 0)
    assert min(v for d in trained["link_bytes"].values() for v in d.values()) >= trained["gradient_bytes"] > 0
    assert trained["loss_last"] < trained["loss_first"] * 0.5
    for framework in ("JAX", "XGBoost"):
        run = steps[f"SDK {framework} TrainJob trains across real nodes"]["data"]
        assert {p["node"] for p in run["pods"]} == workers, run["pods"]
        assert all(p["phase"] == "Succeeded" and p["exit_code"] == 0 for p in run["pods"]), run["pods"]
    assert steps["worker killed mid-run"]["data"]["state"] in ("Complete", "Failed")
    failed = steps["failing pod ends TrainJob Failed"]["data"]
    assert failed["state"] == "Failed" and failed["real"] and failed["exit_codes"] == [3], failed
    # the kind cluster's memory, sampled over its sandbox (engine, registry, nodes, pods)
    assert report["memory"]["peak_rss_mib"] > 0, report.get("memory")
    # the host: sysctls, iptables, links, mounts and /usr/lib as before; no engine process, namespace or cgroup
    assert host_state() == before
    assert_same_rules(iptables, subprocess.run(["iptables-save"], capture_output=True, text=True).stdout)
    assert trainstack_sandboxes("trainstack-kind-") == []
    assert processes_mentioning("dockerd") == [] and processes_mentioning(report["run_dir"] + "/") == []
    assert kubeconfig_state() == user_kubeconfig


def test_e2e_down_removes_what_a_killed_kind_run_left():
    """A CI job killed mid-run (its whole process group, SIGKILL) while kind creates the nodes: the engine, its
    containers and the sandbox outlive it; `e2e down --provider kind` (kind's part of `e2e down`: this group
    leaves the first group's kept clusters alone) removes them, and the host is as before."""
    before = host_state()
    iptables = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
    log = paths.cache_dir() / "e2e" / f"pytest-kind-kill-{os.getpid()}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as sink:
        run = subprocess.Popen([str(ROOT / ".venv" / "bin" / "trainstack"), "e2e", "--provider", "kind"], cwd=ROOT,
                               stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    boxes: list[str] = []
    engine_dir: Path | None = None
    try:
        deadline = time.monotonic() + 600
        while True:  # until the engine runs the three node containers
            assert run.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "kind never started its nodes: " + log.read_text()[-2000:]
            boxes = [p.name for p in sandboxmod.NETNS_DIR.glob(f"{sandboxmod.PREFIX}{kind.SANDBOX_PREFIX}*")
                     if sandboxmod.owner_record(p.name).get("owner_pid") == run.pid]
            engine_dir = Path(str(sandboxmod.owner_record(boxes[0]).get("workdir", ""))) if boxes else None
            if engine_dir and len(list((engine_dir / "docker" / "containers").glob("*"))) >= 3:
                break
            time.sleep(1)
    finally:
        os.killpg(run.pid, signal.SIGKILL)  # the run dies without tearing down
        run.wait()
    try:  # only `e2e down` removes it here; the cleanup below runs when a check fails, for the next module
        assert engine_dir is not None
        run_dir = str(engine_dir.parents[1]) + "/"
        assert processes_mentioning(run_dir), "the killed run left its engine running"
        down = run_cli("e2e", "down", "--provider", "kind", timeout=300)
        assert down.returncode == 0, down.stdout + down.stderr
        # no engine process, container, network namespace, cgroup, mount or data of the run; the host as before
        assert processes_mentioning(run_dir) == [] and processes_mentioning("dockerd") == []
        assert trainstack_sandboxes(boxes[0]) == []
        assert not any(run_dir in ln for ln in Path("/proc/self/mountinfo").read_text().splitlines())
        assert not (engine_dir / "docker").exists()
        assert host_state() == before
        assert_same_rules(iptables, subprocess.run(["iptables-save"], capture_output=True, text=True).stdout)
    except BaseException:
        remove_own_leftovers()
        raise
    log.unlink()
