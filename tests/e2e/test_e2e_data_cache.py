"""`trainstack e2e --data-cache --keep`: the suite with the LWS data cache on (LWS run as a local process),
the cluster kept, then `trainstack e2e down`. One run for both (each is a whole KWOK suite, about 25
CPU-s): keep and down are the same for every kind of run, and a normal run's uninstall and teardown are
tests/e2e/test_e2e_local.py's."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from support.cli import run_cli
from trainstack import tools

from .test_e2e_local import processes_mentioning

pytestmark = pytest.mark.e2e


def test_data_cache_runs_lws_and_the_cache_runtime_and_keep_then_down_removes_everything(tmp_path):
    summary = tmp_path / "summary.json"
    run_dir, kubeconfig = "(not started)", ""
    try:
        # KWOK nodes: the LWS controller runs as a local process, its webhooks pointed at it
        result = run_cli("e2e", "--data-cache", "--keep", "--nodes", "kwok",
                         env={"TRAINSTACK_E2E_SUMMARY": str(summary)}, timeout=600)
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-3000:]
        assert "with the data cache" in result.stdout
        report = json.loads(summary.read_text())
        run_dir = report["run_dir"] + "/"  # its processes (another group's `trainstack e2e` may run meanwhile)
        assert report["passed"] and report["data_cache"] is True
        steps = {s["step"]: s for s in report["steps"]}
        assert all(s["result"] in ("pass", "skip") for s in report["steps"]), report["steps"]
        # the chart's LWS Deployment ran as the pinned lws-controller binary, its webhooks pointed at it
        install = steps["helm install"]["detail"]
        assert "--set dataCache.enabled=true" in install, install
        assert "lws-controller-manager (lws-controller, pid" in install, install
        assert len(steps["controllers and webhooks ready"]["data"]["deployments"]) == 3
        # a LeaderWorkerSet went through LWS's webhooks and its controller made the leader StatefulSet
        lws = steps["data cache: LeaderWorkerSet reconciled"]
        assert lws["result"] == "pass" and "StatefulSet cache-probe" in lws["detail"], lws
        # the cache runtime's TrainJob (dataset-initializer Job, then the node Job) completed
        assert "torch-with-cache" in {j["job"] for j in steps["smoke TrainJobs Complete"]["data"]["jobs"]}
        # --keep: the release stays installed, and the line it prints reaches the running cluster
        assert steps["helm uninstall keeps CRDs and TrainJobs"]["result"] == "skip"
        line = next(ln for ln in result.stderr.splitlines() if ln.startswith("kept: export KUBECONFIG="))
        kubeconfig = line.split("KUBECONFIG=", 1)[1].split(";", 1)[0]
        assert "'trainstack e2e down'" in line
        found = subprocess.run([str(tools.require("kubectl")), "--kubeconfig", kubeconfig, "get", "trainjobs", "-A",
                                "-o", "name"], capture_output=True, text=True, timeout=60)
        assert found.returncode == 0 and "trainjob.trainer.kubeflow.org/torch" in found.stdout, found.stderr
        assert processes_mentioning(run_dir), "--keep keeps the cluster running"
    finally:
        down = run_cli("e2e", "down")  # after a dead run, too
    assert down.returncode == 0, down.stderr
    assert "stopped and removed" in down.stderr
    assert processes_mentioning(run_dir) == []
    assert kubeconfig and not Path(kubeconfig).exists()
