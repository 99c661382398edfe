"""`trainstack bench scale --gpu-scheduling`: the TrainJob path of the scale bench (the same fixed-seed
mix on the same GPU and CPU pools) twice, on a local cluster without the gang feature gates (`off`:
pods placed one by one) and on one with them (`on`: the lock's `kubernetes.featureGates`, the Job
controller's PodGroups and the scheduler's GangScheduling plugin), side by side.

Per run: throughput, stage latencies, the scheduler's CPU seconds, how many PodGroups the Job
controller made, and partially placed jobs: a job is partially placed from the moment the watch sees
its first pod bound until it sees its last one bound (or the end of the run); the figure is the most
jobs partially placed at any one moment, and the jobs that ever were, counting a job only when its
binds spread over more than `SPREAD_S` (the pods of one gang bind in one Permit release, seen by the
watch within a few milliseconds of each other; KWOK completes a pod at once, so a pod that binds a
second after its first sibling leaves room held by a job that cannot yet run).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from typing import Any

from .. import api, paths, progress
from .. import lock as lockmod
from ..e2e import suite as suitemod
from ..e2e.providers.local import LocalProvider
from .scale_run import Bench
from .scale_watch import Tracker
from .scale_workloads import workloads

SPREAD_S = 1.0
MODES = ("off", "on")


def ungated(lock: lockmod.Lock) -> lockmod.Lock:
    """LOCK without the gang feature gates and API: a 1.36 control plane as it comes."""
    kube = {**lock.data["kubernetes"], "featureGates": {}, "runtimeConfig": {}}
    return dataclasses.replace(lock, data={**lock.data, "kubernetes": kube})


def partial_placement(tracker: Tracker, end: float) -> dict[str, Any]:
    """The most jobs partially placed at one moment, and how many ever were (see the module's note)."""
    intervals = []
    for rec in tracker.records.values():
        bound = sorted(rec.pod_bound.values())
        if not bound or not rec.expected:
            continue
        last = bound[rec.expected - 1] if len(bound) >= rec.expected else end
        if last - bound[0] > SPREAD_S:
            intervals.append((bound[0], last))
    edges = sorted([(start, 1) for start, _ in intervals] + [(stop, -1) for _, stop in intervals])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return {"max_partially_placed": most, "jobs_ever_partially_placed": len(intervals),
            "longest_partial_s": round(max((b - a for a, b in intervals), default=0.0), 2)}


def run_mode(mode: str, jobs: int, nodes: int, seed: int, env: str) -> dict[str, Any]:
    """The TrainJob path on a cluster of its own with gangs `on` or `off`."""
    lock = lockmod.load()
    lock = lock if mode == "on" else ungated(lock)
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
        result, tracker = bench.run_path("trainjob", work, namespace, {}, cleanup=False)
        groups = bench.cluster.kubectl("get", api.PODGROUPS, "-n", namespace, "-o", "name", check=False)
        start = min((r.created for r in tracker.records.values() if r.created is not None), default=0.0)
        out = {
            "gates": lock.kubernetes_feature_gates, "runtime_config": lock.kubernetes_runtime_config,
            "trainjobs": jobs, **pools,
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
                      f"{out['scheduler_cpu_s']} CPU s, at most {out['max_partially_placed']} partially placed")
        return out
    finally:
        provider.down(keep=False)
        shutil.rmtree(run_dir, ignore_errors=True)


def compare(jobs: int, nodes: int, seed: int, env: str) -> dict[str, Any]:
    started = time.monotonic()
    runs = {mode: run_mode(mode, jobs, nodes, seed, env) for mode in MODES}
    off, on = runs["off"], runs["on"]
    return {
        **runs,
        "seed": seed, "env": env, "spread_s": SPREAD_S,
        "goal": "0 partially placed jobs at any moment with gangs on",
        "meets_goal": on["max_partially_placed"] == 0 and on["completed"] == jobs,
        "throughput_ratio_on_vs_off": round(on["trainjob_per_s"] / off["trainjob_per_s"], 2)
        if off["trainjob_per_s"] else 0.0,
        "bench_seconds": round(time.monotonic() - started, 1),
    }
