"""`trainstack e2e --data-cache`: the suite with the LWS data cache on, LWS run as a local process."""

from __future__ import annotations

import json

import pytest

from conftest import run_cli

from .test_e2e_local import processes_mentioning

pytestmark = pytest.mark.e2e


def test_data_cache_runs_lws_and_the_cache_runtime(tmp_path):
    summary = tmp_path / "summary.json"
    try:
        # KWOK nodes: the LWS controller runs as a local process, its webhooks pointed at it
        result = run_cli("e2e", "--data-cache", "--nodes", "kwok", env={"TRAINSTACK_E2E_SUMMARY": str(summary)},
                         timeout=600)
    finally:
        run_cli("e2e", "down")  # only stops what a dead run left; a no-op after a normal one
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-3000:]
    assert "with the data cache" in result.stdout
    report = json.loads(summary.read_text())
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
    assert steps["helm uninstall keeps CRDs and TrainJobs"]["result"] == "pass"
    # nothing of the run left running (another group's `trainstack e2e` may run meanwhile: its own folder)
    assert processes_mentioning(report["run_dir"] + "/") == []
