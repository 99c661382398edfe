"""`trainstack bench scale` end to end at a test's size (20 TrainJobs, then the same workloads as raw
JobSets and raw Jobs, on 10 fake GPU nodes; `--quick` runs 100, the benchmark 1,000): the results
file has the keys the benchmark promises, every workload of every path completed (none lost under
load), and the picture is written. Plus the pieces it relies on, without a cluster: the controllers'
metrics on 127.0.0.1 and the workload mix."""

from __future__ import annotations

import json

import pytest

from support.cli import run_cli
from trainstack.benchmarks import scale_workloads as scale
from trainstack.cluster.local import BINARIES

from .conftest import need_binaries

BESIDE_REAL_NODES = True  # KWOK clusters and local processes only (tests/e2e/conftest.py)

KEYS = ("trainjobs", "nodes", "trainjob_per_s", "raw_jobset_per_s", "raw_job_per_s", "ratio_vs_jobset", "stages",
        "trainer_cpu_s", "trainer_peak_rss_mb", "jobset_cpu_s", "jobset_peak_rss_mb")
JOBS = 20  # workloads per path: the same paths, stages and checks as --quick's 100, in a fraction of the CPU


@pytest.mark.e2e
def test_quick_scale_bench_completes_every_workload_on_every_path(tmp_path):
    need_binaries(*BINARIES, "helm", "trainer-controller-manager", "jobset-controller")
    result = run_cli("bench", "scale", "--jobs", str(JOBS), "--nodes", "10", "--out-dir", str(tmp_path),
                     timeout=600)
    assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-2000:]
    data = json.loads((tmp_path / "scale.json").read_text())
    assert set(KEYS) <= set(data), sorted(set(KEYS) - set(data))
    assert (data["trainjobs"], data["nodes"]) == (JOBS, 10)
    for path in scale.PATHS:
        got = data["paths"][path]
        assert (got["workloads"], got["completed"], got["failed"], got["lost"]) == (JOBS, JOBS, 0, 0), (path, got)
        assert got["create_errors"] == 0, got.get("last_create_error")
        assert got["per_s"] > 0 and got["completions_curve"][-1][1] == JOBS
        want = scale.STAGES if path == "trainjob" else scale.STAGES[1:]
        assert set(got["stages"]) == set(want), path
        for stage, pct in got["stages"].items():
            assert 0 <= pct["p50"] <= pct["p90"] <= pct["p99"] <= pct["max"], (path, stage, pct)
        assert got["pods"] == data["pods"] >= JOBS  # the same workloads: 1-4 pods each
    stages = data["stages"]
    assert stages["jobset_created"]["p50"] <= stages["pods_created"]["p50"] <= stages["complete"]["p50"]
    assert data["ratio_vs_jobset"] == round(data["trainjob_per_s"] / data["raw_jobset_per_s"], 2)
    # measured, not assumed: the controllers ran, used memory and reconciled every workload
    assert data["trainer_cpu_s"] > 0 and data["jobset_cpu_s"] > 0
    assert data["trainer_peak_rss_mb"] > 10 and data["jobset_peak_rss_mb"] > 10
    controllers = data["paths"]["trainjob"]["controllers"]
    assert sum(v for k, v in controllers["jobset-controller"]["reconciles"].items() if k.endswith("/success")) >= JOBS
    assert sum(controllers["trainer-controller-manager"]["api_requests"].values()) >= JOBS
    for name in ("trainer-controller-manager", "jobset-controller"):  # the workers each really ran with
        assert controllers[name]["max_concurrent_reconciles"], name
    assert data["paths"]["trainjob"]["apiserver"]["requests"].get("trainjobs/POST", 0) >= JOBS
    png = (tmp_path / "scale.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
