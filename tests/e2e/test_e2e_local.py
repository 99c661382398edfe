"""`trainstack e2e --provider local`: the whole suite once, as `make e2e` runs it."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT
from support.cli import run_cli
from trainstack import lock as lockmod

pytestmark = pytest.mark.e2e

REQUIRED = [
    "render the chart",
    "cluster (local)",
    "helm install",
    "CRDs established",
    "controllers and webhooks ready",
    "golden runtimes installed",
    "policies installed",
    "helm test",
    "smoke TrainJobs Complete",
    "JobSets and Jobs created",
    "framework env injected",
    "pod placement",
    "failing pod ends TrainJob Failed",
    "helm uninstall keeps CRDs and TrainJobs",
    "teardown",
]


def processes_mentioning(fragment: str) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if fragment in cmdline:
            found.append(f"{proc.name}: {cmdline[:160]}")
    return found


def assert_same_rules(before: str, after: str) -> None:
    """iptables-save without its timestamps and counters."""
    def rules(text: str) -> list[str]:
        return [ln.split(" [")[0] for ln in text.splitlines() if not ln.startswith("#")]

    assert rules(after) == rules(before), "the host's iptables rules changed"


def kubeconfig_state() -> tuple[bool, float]:
    path = Path(os.environ.get("KUBECONFIG") or Path.home() / ".kube" / "config")
    return (path.is_file(), path.stat().st_mtime if path.is_file() else 0.0)


REAL_NODE_STEPS = [
    "SDK TrainJob trains across real nodes",
    "its run is in MLflow, and only its team's",
    "a team's pods refuse other namespaces",
    "checkpoint outlives the pods",
    "worker killed mid-run",
    "SDK MLX TrainJob submitted (trains beside the next steps)",
    "a TrainJob whose pods cannot start is flagged",
    "SDK fine-tune (TorchTune) on the GPU pool",
    "SDK JAX TrainJob trains across real nodes",
    "SDK XGBoost TrainJob trains across real nodes",
    "SDK MLX TrainJob trains across real nodes over MPI",
    "JAX, XGBoost, MLX and restarted runs are in MLflow",
    "TrainJobs naming only a runtime Complete",
]


def trainstack_sandboxes(prefix: str = "trainstack-") -> list[str]:
    """The network namespaces and cgroup roots whose names start with PREFIX (a cluster's name: its own)."""
    netns = Path("/run/netns")
    found = sorted(p.name for p in netns.iterdir() if p.name.startswith(prefix)) if netns.is_dir() else []
    cgroups = Path("/sys/fs/cgroup")
    for hierarchy in sorted(cgroups.iterdir()) if cgroups.is_dir() else []:
        if hierarchy.is_dir() and not hierarchy.is_symlink():
            found += [f"{hierarchy.name}/{p.name}" for p in hierarchy.iterdir()
                      if p.is_dir() and p.name.startswith(prefix)]
    return found


def test_local_e2e_passes_and_leaves_nothing_running(tmp_path):
    from trainstack.e2e.providers.local import cluster_name, real_node_built

    assert real_node_built(lockmod.load()), "make setup builds the real node's parts; make e2e runs on it"
    sysctls = {k: Path("/proc/sys", k).read_text() for k in ("vm/overcommit_memory", "kernel/panic",
                                                              "kernel/panic_on_oops")}
    iptables = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
    summary = tmp_path / "summary.json"
    user_kubeconfig = kubeconfig_state()
    artifacts_before = set((ROOT / "artifacts").glob("e2e-*")) if (ROOT / "artifacts").is_dir() else set()
    try:
        result = run_cli(
            "e2e", "--provider", "local", "--env", "dev", env={"TRAINSTACK_E2E_SUMMARY": str(summary)}, timeout=1200
        )
    finally:
        run_cli("e2e", "down")  # only stops what a dead run left; a no-op after a normal one
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-3000:]
    report = json.loads(summary.read_text())
    assert {s["provider"] for s in report["steps"]} == {"local"}  # each step beside the provider it ran on
    steps = {s["step"]: s for s in report["steps"]}
    for name in REQUIRED + REAL_NODE_STEPS:
        assert steps[name]["result"] == "pass", (name, steps[name])
    # what users install: the packaged chart, pushed to the cluster's registry and installed from there with
    # helm; then the chart's own `helm test` passed on the cluster: the golden runtimes served, a TrainJob
    # admitted by the webhooks and policies, a `:latest` one denied
    assert steps["helm install"]["data"]["chart"].startswith("oci://127.0.0.1:"), steps["helm install"]
    # (stock helm v4 on the install; helm v3 after a helm3 upgrade: tests/e2e/test_real_platform.py)
    tested = steps["helm test"]["data"]["helm"]
    assert tested["phase"] == "Succeeded" and not tested["failed"] and len(tested["checks"]) == 3, tested
    # the SDK's two-node torch TrainJob ran on two real nodes and trained together, read from the cluster's
    # objects: each pod on its own node, exit 0, its IP in its node's pod CIDR; rank 1 resolved the
    # rendezvous address to rank 0's pod on the other node; the gradients crossed real-1's link (at least half
    # of every step's gradient each way; a ring all-reduce sends all of it)
    trained = steps["SDK TrainJob trains across real nodes"]["data"]
    pods = {p["index"]: p for p in trained["pods"]}
    assert sorted(p["node"] for p in pods.values()) == ["real-0", "real-1"], trained["pods"]
    assert all(p["phase"] == "Succeeded" and p["exit_code"] == 0 and p["container_id"].startswith("containerd://")
               and ipaddress.ip_address(p["ip"]) in ipaddress.ip_network(p["node_pod_cidr"]) for p in pods.values())
    assert trained["rendezvous"]["master_ip"] == pods[0]["ip"] and trained["rendezvous"]["rank"] == 1
    assert trained["loss_last"] < trained["loss_first"] * 0.5
    assert min(trained["link_bytes"]["real-1"].values()) >= trained["gradient_bytes"] > 0
    # one gang on real nodes (docs/scheduling.md): the node step's Job got one PodGroup of minCount 2 from
    # Kubernetes 1.36's Job controller, both pods name it, and the scheduler bound them together
    gang = trained["gang"]
    assert gang["min_count"] == 2 and {p["pod_group"] for p in pods.values()} == {gang["pod_group"]}, gang
    assert 0 <= gang["bound_within_s"] <= 2, gang
    # its run is in MLflow (read back as its namespace's account through a forwarded port): named after the
    # TrainJob, FINISHED, the loss at every step, the checkpoint; another namespace's account is refused it
    read = steps["its run is in MLflow, and only its team's"]["data"]
    assert list(read["runs"]) == [trained["name"]] and len(read["runs"][trained["name"]]) == 1, read
    run = read["run"]
    assert run["status"] == "FINISHED", run
    loss = run["histories"]["loss"]
    assert loss == list(range(1, len(loss) + 1)) and len(loss) > 1, run
    assert run["metrics"]["final_loss"] < trained["loss_first"] and "checkpoint/checkpoint.pt" in run["artifacts"]
    assert read["other_reads_run"] is False and "trainstack-e2e" not in read["other_sees"], read
    assert read["status_link"].endswith(f"/runs/{run['run_id']}"), read  # trainstack status --runs links it
    # the server's port is the tracked namespaces' alone, enforced on the real nodes (kube-router, NetworkPolicy):
    # a pod of the tracked smoke namespace on the other node got through (routed); pods of a namespace nobody
    # tracks, on the server's node (bridged) and on the other, were refused every time
    net = read["network"]
    assert [(p["expect"], p["connected"]) for p in net] == [("admitted", True), ("refused", False), ("refused", False)], net
    assert net[0]["namespace"] == "trainstack-e2e" and net[0]["node"] != net[0]["server_node"], net
    assert {p["node"] for p in net[1:]} == {"real-0", "real-1"} and all(p["failed_attempts"] > 0 for p in net[1:]), net
    # team isolation (docs/teams.md), enforced on the real nodes: team-a's two-node torch TrainJob trained on both
    # nodes; while it ran, rank 0's rendezvous port (29500) and a team-a listener's port refused pods of team-b
    # and of a namespace that is no team's on every attempt of their window, and admitted team-a's pod and the
    # monitoring namespace's, which also scraped the tracking server's metrics over the pod network; rank 0 was
    # still running when the refused windows ended; the job's run is in MLflow, unreadable to team-b
    iso = steps["a team's pods refuse other namespaces"]["data"]
    assert sorted(p["node"] for p in iso["pods"]) == ["real-0", "real-1"], iso["pods"]
    assert all(p["phase"] == "Succeeded" and p["exit_code"] == 0 for p in iso["pods"]), iso["pods"]
    assert iso["loss_last"] < iso["loss_first"] * 0.5, iso
    probes = {p["namespace"]: p for p in iso["probes"]}
    assert sorted(probes) == ["monitoring", "team-a", "team-b", "trainstack-e2e-untracked"], probes
    for ns, probe in probes.items():
        assert [t.rsplit(":", 1)[1] for t in probe["targets"]] == ["29500", "8080"], probe
        admitted = ns in ("team-a", "monitoring")
        assert probe["connected"] == {t: admitted for t in probe["targets"]}, probe
        if not admitted:
            assert all(probe["result"][t]["failed_attempts"] > 1 for t in probe["targets"]), probe
            assert probe["result"]["window_end"] - probe["result"]["window_start"] >= 2 * probe["window_s"] - 1, probe
    assert probes["team-a"]["node"] != iso["rank0"]["node"] and probes["team-b"]["node"] == iso["rank0"]["node"]
    assert iso["rank0_ended"] is None or iso["rank0_ended"] > iso["refused_windows_end"], iso
    assert probes["monitoring"]["result"]["scrape"]["status"] == 200, probes["monitoring"]
    assert probes["monitoring"]["result"]["scrape"]["mlflow_series"] > 0, probes["monitoring"]
    assert iso["mlflow"]["status"] == "FINISHED" and iso["mlflow"]["other_reads_run"] is False, iso["mlflow"]
    assert "team-a" not in iso["mlflow"]["other_sees"], iso["mlflow"]
    # JAX and XGBoost did the same: two pods on two real nodes, exit 0, on the images built here
    for framework in ("JAX", "XGBoost"):
        run = steps[f"SDK {framework} TrainJob trains across real nodes"]["data"]
        assert sorted(p["node"] for p in run["pods"]) == ["real-0", "real-1"], run["pods"]
        assert all(p["phase"] == "Succeeded" and p["exit_code"] == 0 for p in run["pods"]), run["pods"]
    # MLX over MPI: the launcher (mpirun, also rank 1) and the node pod (sshd, rank 0) on the two real nodes, each
    # rank in its own pod; the launcher exited 0; the loss fell and both ranks ended with the same weights
    mlx = steps["SDK MLX TrainJob trains across real nodes over MPI"]["data"]
    assert sorted(p["node"] for p in mlx["pods"]) == ["real-0", "real-1"], mlx["pods"]
    launcher = next(p for p in mlx["pods"] if "-launcher-" in p["pod"])
    assert (launcher["phase"], launcher["exit_code"]) == ("Succeeded", 0), launcher
    assert sorted(r["host"] for r in mlx["starts"]) == sorted(p["hostname"] for p in mlx["pods"]), mlx["starts"]
    assert [r["world_size"] for r in mlx["ranks"]] == [2, 2] and len({r["weights_sha256"] for r in mlx["ranks"]}) == 1
    assert mlx["metrics"]["loss_last"] < 1e-3 < mlx["metrics"]["loss_first"], mlx["metrics"]
    # their runs are in MLflow with each one's own metrics and model; the killed-worker TrainJob's attempt that
    # lost its worker ended FAILED, the attempt that resumed FINISHED
    runs = steps["JAX, XGBoost, MLX and restarted runs are in MLflow"]["data"]["runs"]
    jax = runs[steps["SDK JAX TrainJob trains across real nodes"]["data"]["name"]]
    xgb = runs[steps["SDK XGBoost TrainJob trains across real nodes"]["data"]["name"]]
    assert [r["status"] for r in jax + xgb] == ["FINISHED", "FINISHED"], runs
    assert jax[0]["metrics"]["final_loss"] < 1e-3 and "model/weights.npy" in jax[0]["artifacts"], jax
    assert xgb[0]["metrics"]["test_accuracy"] > xgb[0]["metrics"]["baseline_accuracy"], xgb
    assert "model/model.json" in xgb[0]["artifacts"], xgb
    # MLX's rank 0 ran on the node pod, started over ssh: the tracking env reached it through mpirun
    mlx_runs = runs[steps["SDK MLX TrainJob trains across real nodes over MPI"]["data"]["name"]]
    assert [r["status"] for r in mlx_runs] == ["FINISHED"] and "model/weights.npy" in mlx_runs[0]["artifacts"], mlx_runs
    assert mlx_runs[0]["metrics"]["final_loss"] < 1e-3, mlx_runs
    if steps["worker killed mid-run"]["data"]["state"] == "Complete":
        killed = runs[steps["worker killed mid-run"]["data"]["name"]]
        assert [r["status"] for r in killed][-1] == "FINISHED", killed
        assert {r["status"] for r in killed[:-1]} == {"FAILED"}, killed
    # a TrainJob whose image was never built: still active, and trainstack status names the pull error
    stuck = steps["a TrainJob whose pods cannot start is flagged"]["data"]
    assert stuck["state"] in ("Pending", "Running") and stuck["reason"] in ("ErrImagePull", "ImagePullBackOff"), stuck
    # torch trains for real on the real node; GPU runtimes stay on the simulated GPU pool
    smoke_jobs = {j["job"]: j for j in steps["smoke TrainJobs Complete"]["data"]["jobs"]}
    assert smoke_jobs["torch"]["real"] and set(smoke_jobs["torch"]["nodes"]) <= {"real-0", "real-1"}, smoke_jobs
    # so do the JAX and XGBoost runtimes' unpatched smoke jobs: their images are built (and have a command)
    assert smoke_jobs["jax"]["real"] and smoke_jobs["xgboost"]["real"] and smoke_jobs["mlx-cpu"]["real"], smoke_jobs
    assert not smoke_jobs["torch-gpu"]["real"] and not {"real-0", "real-1"} & set(smoke_jobs["torch-gpu"]["nodes"])
    failed = steps["failing pod ends TrainJob Failed"]["data"]
    assert failed["state"] == "Failed" and failed["real"] and failed["exit_codes"] == [3], failed
    # the controllers ran as the chart's pods on the real nodes, their images pulled from the cluster's registry
    controllers = steps["controllers and webhooks ready"]["data"]["pods_on_nodes"]
    assert controllers and all(nodes and set(nodes) <= {"real-0", "real-1"} for nodes in controllers.values()), controllers
    # the host was left as it was: sysctls, iptables, no namespace or cgroup of ours
    assert {k: Path("/proc/sys", k).read_text() for k in sysctls} == sysctls
    assert_same_rules(iptables, subprocess.run(["iptables-save"], capture_output=True, text=True).stdout)
    # (the run's own: the other real-node group's clusters run meanwhile, tests/e2e/conftest.py)
    assert trainstack_sandboxes(cluster_name(Path(report["run_dir"]))) == []
    assert steps["image policy on ':latest'"]["result"] in ("pass", "skip")
    # one smoke job per golden runtime, torch on CPU and GPU among them
    assert {"torch", "torch-gpu"} <= set(smoke_jobs)
    assert steps["pod placement"]["data"]["gpu_pods_on_gpu_nodes"] > 0
    # the summary table is printed with a row per step
    for name in REQUIRED:
        assert name.split()[0] in result.stdout
    # nothing left running or listening: no process refers to the run's folder (the e2e tier's other groups may
    # run `trainstack e2e` meanwhile, in folders of their own)
    assert processes_mentioning(report["run_dir"] + "/") == []
    artifacts_after = set((ROOT / "artifacts").glob("e2e-*")) if (ROOT / "artifacts").is_dir() else set()
    assert artifacts_after == artifacts_before, "a passing run keeps no artifacts"
    assert kubeconfig_state() == user_kubeconfig, "the user's kubeconfig was changed"
