"""`trainstack bench scale`: many TrainJobs on many fake GPU nodes, against the same workloads as
raw JobSets and raw Jobs, on one local control plane.

The chart is installed the way `make e2e` installs it on the local provider with KWOK nodes only:
the Trainer and JobSet controllers run as host processes (hostcontrollers), so their CPU seconds
and peak RSS come from /proc and their /metrics from 127.0.0.1. The GPU pool is resized to
`--nodes` nodes of 8 `nvidia.com/gpu` each (labelled and tainted as the golden GPU runtimes select
and tolerate) beside a CPU pool of a quarter as many nodes.

Three paths run one after the other, each in a namespace of its own that is deleted (and waited
for) before the next starts:

1. `trainjob`: `--jobs` TrainJobs on the golden runtimes (torch, JAX and XGBoost, CPU and GPU, 1-4
   nodes each, from a fixed seed), created from a pool of threads as fast as the API server takes
   them;
2. `jobset`: the JobSets the Trainer created in path 1, created directly (no Trainer);
3. `job`: each of those JobSets' replicated Jobs, created directly (no JobSet).

Per workload, from watches (one per kind and namespace, never a poll per object), the client's
receive time of: the create returning, the JobSet, all pods created, all bound, all Running, the
workload Complete. KWOK plays the kubelet with upstream's `fast` stages, identically for the three
paths: a pod is Running as soon as it is bound and a Job's pod Succeeds as soon as it is Running
(no run time), so the figures measure the control plane and the controllers, not training.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from .. import lock as lockmod
from .. import paths, progress, yamlio
from .. import render as rendermod
from ..cluster.kwok import RUN_TIME_ANNOTATION
from ..e2e import suite as suitemod
from ..e2e.providers.local import LocalProvider
from ..errors import UserError
from ..jsontypes import dig
from .scale_gang import compare
from .scale_report import plot, plot_gang, table
from .scale_run import GOAL_RATIO, THREADS, Bench
from .scale_workloads import PATHS, SEED

QUICK = {"jobs": 100, "nodes": 10}
FULL = {"jobs": 1000, "nodes": 100}
GROWTH = ((100, 10), (300, 30), (1000, 100))
KWOK_STAGES = ("upstream fast stages (kwok pinned in the lock): pod-ready and pod-complete have no delay: "
               "a bound pod is Running at once and a Job's Running pod Succeeds at once, for all three paths")


def tuned_source(tuned: str) -> Path:
    """`--tuned ENV` (overlays/ENV: the values files its kustomization lists) or `--tuned FILE` (a values file)."""
    if Path(tuned).suffix not in (".yaml", ".yml"):
        rendermod.values_files(tuned)  # one line for an unknown environment or a missing values file
        return rendermod.overlay_dir(tuned)
    source = Path(tuned)
    if not source.is_file():
        raise UserError(f"--tuned {tuned}: no values file {source}", "name an overlay (dev, staging, prod) or a file",
                        exit_code=2)
    return source


def tuned_values(path: Path, tuned: str) -> Path | None:
    """The controller settings of a values file (client QPS/burst, concurrency) alone, as a values
    file: what `--tuned` adds to the run so the rest of the environment stays as benchmarked."""
    source = tuned_source(tuned)
    data = rendermod.env_values(tuned) if source.is_dir() else yamlio.load(source.read_text())
    trainer = dig(data, "kubeflow-trainer", "manager", default={}).get("config") or {}
    jobset = dig(data, "jobset", "controller", default={}).get("clientConnection")
    values: dict[str, Any] = {}
    picked = {k: trainer[k] for k in ("clientConnection", "controller") if k in trainer}
    if picked:
        values["kubeflow-trainer"] = {"manager": {"config": picked}}
    if jobset:
        values["jobset"] = {"controller": {"clientConnection": jobset}}
    if not values:
        return None
    path.write_text(f"# controller settings from {source}\n" + yaml.safe_dump(values))
    return path


def run_once(jobs: int, nodes: int, seed: int, env: str, tuned_from: str | None,
             sizes: tuple[tuple[int, int], ...] = ()) -> dict[str, Any]:
    lock = lockmod.load()
    run_dir = paths.cache_dir() / "e2e" / f"bench-scale-{os.getpid()}"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    provider = LocalProvider(run_dir, lock=lock, nodes="kwok")
    extra: list[Path] = []
    if tuned_from:
        values = tuned_values(run_dir / "values-tuned.yaml", tuned_from)
        if values is None:
            raise UserError(f"{tuned_source(tuned_from)}: sets no kubeflow-trainer.manager.config.clientConnection, "
                            "kubeflow-trainer.manager.config.controller or jobset.controller.clientConnection",
                            "set them there or run without --tuned")
        extra.append(values)
    base = provider.values_files
    provider.values_files = lambda: [*base(), *extra]  # type: ignore[method-assign]
    suite = suitemod.Suite(provider, env, run_dir, lock=lock)
    start = time.monotonic()
    try:
        for name, fn in suite.plan()[:6]:  # render, cluster, helm install, CRDs, controllers, runtimes
            suite.step(name, fn)
        setup = round(time.monotonic() - start, 1)
        bench = Bench(suite, provider)
        growth = []
        for size_jobs, size_nodes in sizes:
            one = bench.run_size(size_jobs, size_nodes, seed, tag=f"-{size_jobs}", last=False)
            growth.append(growth_row(one))
        result = bench.run_size(jobs, nodes, seed)
        result["setup_seconds"] = setup
        if growth:
            result["growth"] = [*growth, growth_row(result)]
        return result
    finally:
        provider.down(keep=False)
        shutil.rmtree(run_dir, ignore_errors=True)


def growth_row(result: dict[str, Any]) -> dict[str, Any]:
    tj = result["paths"]["trainjob"]
    return {"trainjobs": result["trainjobs"], "nodes": result["nodes"], "trainjob_per_s": result["trainjob_per_s"],
            "raw_jobset_per_s": result["raw_jobset_per_s"], "raw_job_per_s": result["raw_job_per_s"],
            "ratio_vs_jobset": result["ratio_vs_jobset"], "complete_p50_s": tj["stages"].get("complete", {}).get("p50"),
            "complete_p99_s": tj["stages"].get("complete", {}).get("p99"),
            "trainer_peak_rss_mb": result["trainer_peak_rss_mb"], "jobset_peak_rss_mb": result["jobset_peak_rss_mb"],
            "trainer_cpu_ms_per_trainjob": result["trainer_cpu_ms_per_trainjob"],
            "jobset_cpu_ms_per_trainjob": result["jobset_cpu_ms_per_trainjob"]}


def with_gang_comparison(args: argparse.Namespace, jobs: int, nodes: int, seed: int, env: str) -> dict[str, Any]:
    """`--gpu-scheduling`: the TrainJob path with gang scheduling off and on (scale_gang), recorded under
    `gpu_scheduling` beside the last full run's figures, which stay as they were."""
    folder = Path(getattr(args, "results_dir", None) or paths.repo_root() / "bench" / "results")
    previous = folder / "scale.json"
    kept = json.loads(previous.read_text()) if previous.is_file() else {}
    for key in ("part", "date", "machine", "wall_seconds"):  # run_part writes this run's
        kept.pop(key, None)
    load_before = [round(x, 2) for x in os.getloadavg()]
    run_seconds = getattr(args, "run_seconds", None) or 0
    if run_seconds < 0:
        raise UserError("bench scale: --run-seconds must be 0 or more", exit_code=2)
    comparison = compare(jobs, nodes, seed, env, run_seconds)
    comparison["date"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    comparison["load_average"] = {"before": load_before, "after": [round(x, 2) for x in os.getloadavg()],
                                  "cpus": os.cpu_count()}
    comparison["kwok_stages"] = KWOK_STAGES if not run_seconds else (
        f"upstream fast stages (kwok pinned in the lock), but every pod runs {run_seconds} s once Running "
        f"(pod-complete's delay, annotation {RUN_TIME_ANNOTATION})")
    folder.mkdir(parents=True, exist_ok=True)
    plot_gang(comparison, folder / "scale-gang.png")
    comparison["plot"] = "scale-gang.png"
    off, on = comparison["off"], comparison["on"]
    progress.info(f"gangs off: {off['trainjob_per_s']}/s, at most {off['max_held']} partially placed; "
                  f"on: {on['trainjob_per_s']}/s, at most {on['max_held']}")
    return {**kept, "gpu_scheduling": comparison}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The `scale` bench part."""
    quick = getattr(args, "quick", False)
    defaults = QUICK if quick else FULL
    jobs = getattr(args, "jobs", None) or defaults["jobs"]
    nodes = getattr(args, "nodes", None) or defaults["nodes"]
    if jobs < 1 or nodes < 1:
        raise UserError("bench scale: --jobs and --nodes must be at least 1", exit_code=2)
    seed = getattr(args, "seed", None) or SEED
    env = getattr(args, "env", None) or "dev"
    sizes = tuple(s for s in GROWTH if s[0] < jobs) if getattr(args, "growth", False) else ()
    if getattr(args, "gpu_scheduling", False):
        return with_gang_comparison(args, jobs, nodes, seed, env)
    started = time.monotonic()
    load_before = [round(x, 2) for x in os.getloadavg()]
    result = run_once(jobs, nodes, seed, env, None, sizes)
    # the machine's load (1, 5, 15 min) before and after: other work on it skews every figure
    result["load_average"] = {"before": load_before, "after": [round(x, 2) for x in os.getloadavg()],
                              "cpus": os.cpu_count()}
    result["kwok_stages"] = KWOK_STAGES
    result["seed"] = seed
    result["env"] = env
    result["threads"] = THREADS
    if getattr(args, "tuned", None):
        tuned = run_once(jobs, nodes, seed, env, args.tuned)
        source = tuned_source(args.tuned).resolve()
        where = source.relative_to(paths.repo_root()) if source.is_relative_to(paths.repo_root()) else source
        result["tuned"] = {"from": str(where),
                           **{k: v for k, v in tuned.items() if k != "paths"},
                           "paths": {p: {k: v for k, v in tuned["paths"][p].items()
                                         if k not in ("completions_s", "stage_samples_s")} for p in PATHS}}
        result["before_after"] = {
            "before": {k: result[k] for k in ("trainjob_per_s", "raw_jobset_per_s", "ratio_vs_jobset")},
            "after": {k: tuned[k] for k in ("trainjob_per_s", "raw_jobset_per_s", "ratio_vs_jobset")},
            "before_settings": result["settings"], "after_settings": tuned["settings"],
        }
    result["bench_seconds"] = round(time.monotonic() - started, 1)
    folder = Path(getattr(args, "results_dir", None) or paths.repo_root() / "bench" / "results")
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / "scale.png"
    plot(result, out)
    table(result)
    result["plot"] = out.name
    for path in PATHS:  # the samples are in the picture; the file keeps percentiles and a completion curve
        p = result["paths"][path]
        p.pop("stage_samples_s", None)
        ends = p.pop("completions_s", [])
        step = max(1, len(ends) // 50)
        p["completions_curve"] = [[ends[i], i + 1] for i in range(step - 1, len(ends), step)]
    result["summary"] = (f"{result['trainjobs']} TrainJobs on {result['nodes']} GPU nodes: "
                         f"{result['trainjob_per_s']}/s vs raw JobSet {result['raw_jobset_per_s']}/s "
                         f"(ratio {result['ratio_vs_jobset']}, goal >= {GOAL_RATIO}), "
                         f"raw Job {result['raw_job_per_s']}/s")
    return result
