"""`trainstack bench scale --gpu-scheduling`: the TrainJob path of the scale bench (the same fixed-seed
mix on the same GPU and CPU pools) twice, on a local cluster without the gang feature gates (`off`:
pods placed one by one) and on one with them (`on`: the lock's `kubernetes.featureGates`, the Job
controller's PodGroups and the scheduler's GangScheduling plugin), side by side.

Per run: throughput, stage latencies, the scheduler's CPU seconds, how many PodGroups the Job
controller made, and partially placed jobs: a job is partially placed from the moment the watch sees
its first pod bound until it sees its last one bound (or the end of the run). A gang's pods pass the
scheduler's Permit together and are then bound by separate API calls, which the watch saw up to 1.5 s
apart on a busy API server; so the figures count a job only when its binds spread over more than a
threshold: `held` (the goal's figure) over HELD_S, `partially_placed` over SPREAD_S (the figure of
earlier runs). Each is the most jobs at one moment and the jobs that ever were; `spread_histogram`
counts every multi-pod job by how far apart its binds were. With `--run-seconds` each pod runs that
long, so the pools fill and a partially placed job holds its nodes while the rest of it waits for
room; without it KWOK completes a pod at once and room is never short for long.
"""

from __future__ import annotations

import os
import shutil
import time
from typing import Any

from .. import api, paths, progress
from .. import lock as lockmod
from ..cluster.kwok import RUN_TIME_ANNOTATION
from ..e2e import suite as suitemod
from ..e2e.providers.local import LocalProvider
from .scale_run import Bench
from .scale_watch import Tracker
from .scale_workloads import workloads

SPREAD_S = 1.0
HELD_S = 5.0
# how far apart a job's binds were (label: upper bound in seconds)
SPREAD_BUCKETS = {"<=1s": 1.0, "1-5s": 5.0, "5-30s": 30.0, "30-120s": 120.0, ">120s": float("inf")}
MODES = ("off", "on")


def _summary(intervals: list[tuple[float, float]], prefix: str) -> dict[str, Any]:
    edges = sorted([(start, 1) for start, _ in intervals] + [(stop, -1) for _, stop in intervals])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return {f"max_{prefix}": most, f"jobs_ever_{prefix}": len(intervals),
            f"longest_{prefix}_s": round(max((b - a for a, b in intervals), default=0.0), 2)}


def partial_placement(tracker: Tracker, end: float) -> dict[str, Any]:
    """Partially placed jobs (see the module's note): binds spread over more than HELD_S (`held`, the
    goal's figure) and over more than SPREAD_S (`partially_placed`), and how far apart every multi-pod
    job's binds were (`spread_histogram`, seconds: count)."""
    spreads = []
    for rec in tracker.records.values():
        bound = sorted(rec.pod_bound.values())
        if not bound or rec.expected < 2:
            continue
        spreads.append((bound[0], bound[rec.expected - 1] if len(bound) >= rec.expected else end))
    histogram = dict.fromkeys(SPREAD_BUCKETS, 0)
    for start, stop in spreads:
        histogram[next(label for label, top in SPREAD_BUCKETS.items() if stop - start <= top)] += 1
    return {**_summary([i for i in spreads if i[1] - i[0] > HELD_S], "held"),
            **_summary([i for i in spreads if i[1] - i[0] > SPREAD_S], "partially_placed"),
            "spread_histogram": histogram}


def run_mode(mode: str, jobs: int, nodes: int, seed: int, env: str, run_seconds: int = 0) -> dict[str, Any]:
    """The TrainJob path on a cluster of its own with gangs `on` or `off`; each pod runs RUN_SECONDS."""
    lock = lockmod.load()
    lock = lock if mode == "on" else lock.without_gates()
    run_dir = paths.cache_dir() / "e2e" / f"bench-gang-{mode}-{os.getpid()}"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    provider = LocalProvider(run_dir, lock=lock, nodes="kwok")
    suite = suitemod.Suite(provider, env, run_dir, lock=lock)
    try:
        for name, fn in suite.plan()[:6]:  # render, cluster, helm install, CRDs, controllers, runtimes
            suite.step(name, fn)
        bench = Bench(suite, provider)
        pools = bench.scale_nodes(nodes)
        available = [r["metadata"]["name"] for r in suitemod.golden_runtimes(suite.rendered)]
        work = workloads(jobs, available, seed)
        namespace = f"scale-gang-{mode}"
        progress.info(f"  gangs {mode}: {jobs} TrainJobs on {pools['gpu_nodes']} GPU + {pools['cpu_nodes']} CPU nodes")
        annotations = {RUN_TIME_ANNOTATION: f"{run_seconds}s"} if run_seconds else {}
        result, tracker = bench.run_path("trainjob", work, namespace, {}, cleanup=False, pod_annotations=annotations)
        groups = bench.cluster.kubectl("get", api.PODGROUPS, "-n", namespace, "-o", "name", check=False)
        start = min((r.created for r in tracker.records.values() if r.created is not None), default=0.0)
        out = {
            "gates": lock.kubernetes_feature_gates, "runtime_config": lock.kubernetes_runtime_config,
            "trainjobs": jobs, **pools, "run_seconds": run_seconds,
            "completed": result["completed"], "failed": result["failed"], "lost": result["lost"],
            "trainjob_per_s": result["per_s"], "seconds_to_last_complete": result["seconds_to_last_complete"],
            "stages": result["stages"],
            "scheduler_cpu_s": result["cpu_s"].get("kube-scheduler", 0.0),
            "controller_manager_cpu_s": result["cpu_s"].get("kube-controller-manager", 0.0),
            "apiserver_cpu_s": result["cpu_s"].get("kube-apiserver", 0.0),
            "podgroups": len(groups.stdout.split()) if groups.returncode == 0 else 0,
            "multi_node_trainjobs": sum(1 for w in work if w.num_nodes > 1),
            **partial_placement(tracker, start + result["seconds_to_last_complete"] + 1),
        }
        progress.info(f"    {out['completed']}/{jobs} complete, {out['trainjob_per_s']}/s, scheduler "
                      f"{out['scheduler_cpu_s']} CPU s, at most {out['max_held']} partially placed for over {HELD_S:.0f} s "
                      f"({out['max_partially_placed']} over {SPREAD_S} s)")
        return out
    finally:
        provider.down(keep=False)
        shutil.rmtree(run_dir, ignore_errors=True)


def compare(jobs: int, nodes: int, seed: int, env: str, run_seconds: int = 0) -> dict[str, Any]:
    started = time.monotonic()
    runs = {mode: run_mode(mode, jobs, nodes, seed, env, run_seconds) for mode in MODES}
    off, on = runs["off"], runs["on"]
    return {
        **runs,
        "seed": seed, "env": env, "spread_s": SPREAD_S, "held_s": HELD_S,
        "goal": f"0 jobs partially placed (binds spread over more than {HELD_S:.0f} s) at any moment with gangs on",
        "meets_goal": on["max_held"] == 0 and on["completed"] == jobs,
        "throughput_ratio_on_vs_off": round(on["trainjob_per_s"] / off["trainjob_per_s"], 2)
        if off["trainjob_per_s"] else 0.0,
        "bench_seconds": round(time.monotonic() - started, 1),
    }
