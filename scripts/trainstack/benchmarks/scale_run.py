"""One size of `trainstack bench scale`: the GPU pool resized, then the three paths (TrainJobs, raw
JobSets, raw Jobs) one after the other in namespaces of their own, and the record of the run."""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, NotRequired, TypedDict

import yaml

from .. import api, kubeapi, progress
from ..cluster.local import GPU_RESOURCE
from ..e2e import smokejobs as smokemod
from ..e2e import suite as suitemod
from ..errors import UserError
from ..jsontypes import dig
from .scale_meter import Meter, log_errors, percentiles
from .scale_watch import Tracker, Watch
from .scale_workloads import (
    MAX_NODES_PER_JOB,
    PATHS,
    SCALE_LABEL,
    STAGES,
    Workload,
    expected_pods,
    raw_jobs,
    raw_jobset,
    workloads,
)

GPU_NODE = {"cpu": "96", "memory": "1024Gi"}  # 8 GPUs, room for 8 one-GPU pods (4 CPU, 32Gi each)
THREADS = 16
GOAL_RATIO = 0.5
SCRAPER = "trainstack-bench-scraper"


class CreateStats(TypedDict):
    """What the POSTs of one path met: retried attempts, objects given up on, the last error seen."""
    retries: int
    errors: int
    last_error: NotRequired[str]


class Bench:
    def __init__(self, suite: suitemod.Suite, provider: Any, threads: int = THREADS) -> None:
        self.suite, self.provider, self.threads = suite, provider, threads
        self.cluster = provider.cluster
        self.api = kubeapi.client(self.cluster.kubeconfig, pool=threads + 8)
        self.token = self._scraper_token()
        self.meter = Meter(provider, self.api, self.token)
        self._errors_seen: dict[str, dict[str, int]] = {}

    def _scraper_token(self) -> str:
        """A ServiceAccount allowed GET /metrics (JobSet checks the token; Trainer v2.3.0 checks nothing)."""
        ns = api.NAMESPACE
        self.cluster.apply([
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SCRAPER, "namespace": ns}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": SCRAPER},
             "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": SCRAPER},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": SCRAPER},
             "subjects": [{"kind": "ServiceAccount", "name": SCRAPER, "namespace": ns}]},
        ])
        return self.cluster.kubectl("create", "token", SCRAPER, "-n", ns, "--duration=24h").stdout.strip()

    # -- nodes ----------------------------------------------------------------------------
    def scale_nodes(self, gpu_nodes: int) -> dict[str, int]:
        """The GPU pool at `gpu_nodes` nodes of 8 GPUs (sized for 8 one-GPU pods), the CPU pool at a quarter."""
        cpu_nodes = max(2, gpu_nodes // 4)
        existing = {n["metadata"]["name"]: n for n in kubeapi.items(self.api, kubeapi.resource(self.api, "nodes"))}
        pools = []
        create, delete = [], []
        for pool in self.cluster.pools:
            if pool.name == "gpu":
                pool = replace(pool, count=max(pool.count, gpu_nodes), **GPU_NODE)
            elif pool.name == "cpu":
                pool = replace(pool, count=max(pool.count, cpu_nodes))
            for node in pool.nodes():
                have = existing.get(node["metadata"]["name"])
                if have is not None and have["status"].get("capacity", {}).get("cpu") != pool.cpu:
                    delete.append(node["metadata"]["name"])
                if have is None or node["metadata"]["name"] in delete:
                    create.append(node)
            pools.append(pool)
        if delete:
            self.cluster.kubectl("delete", "node", *delete, "--wait=true", timeout=120)
        if create:
            self.cluster.kubectl("create", "-f", "-", input_text=yaml.safe_dump_all(create), timeout=120)
        self.cluster.pools = pools
        self.cluster.wait_nodes_ready(timeout=180)
        gpu = next(p for p in pools if p.name == "gpu")
        return {"gpu_nodes": gpu.count, "cpu_nodes": next(p.count for p in pools if p.name == "cpu"),
                "gpus_per_node": int(gpu.extended.get(GPU_RESOURCE, 0))}

    # -- API calls --------------------------------------------------------------------------
    def _create(self, path: str, body: dict[str, Any], stats: CreateStats) -> None:
        for attempt in range(12):
            try:
                self.api.call_api(path, "POST", body=body, auth_settings=["BearerToken"],
                                  header_params={"Content-Type": "application/json", "Accept": "application/json"},
                                  _preload_content=False, _return_http_data_only=True, _request_timeout=(10, 60))
                return
            except kubeapi.ApiException as err:
                if err.status == 409:  # a retry after a timeout that had in fact created it
                    return
                if err.status not in (429, 500, 502, 503, 504) or attempt == 11:
                    stats["errors"] += 1
                    reply = (err.body or b"")[:200]
                    stats["last_error"] = f"{err.status} {err.reason}: {reply!r}"
                    return
            except Exception as err:  # noqa: BLE001 - connection reset, timeout: try again
                if attempt == 11:
                    stats["errors"] += 1
                    stats["last_error"] = str(err)[:200]
                    return
            stats["retries"] += 1
            time.sleep(min(2.0, 0.05 * 2 ** attempt))

    def namespace(self, name: str) -> None:
        self.cluster.kubectl("create", "namespace", name)
        # pods need the namespace's default ServiceAccount, which its controller adds: watch for it
        kubeapi.wait_for(self.api, kubeapi.resource(self.api, "serviceaccounts", name),
                         lambda accounts: "default" in accounts, 30)

    def delete_namespace(self, name: str, timeout: float = 600) -> float:
        start = time.monotonic()
        self.cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
        if not kubeapi.wait_for(self.api, kubeapi.resource(self.api, "namespaces"), lambda found: name not in found,
                                timeout, field_selector=f"metadata.name={name}"):
            raise UserError(f"namespace {name} not deleted within {timeout:.0f}s")
        return round(time.monotonic() - start, 1)

    # -- one path ---------------------------------------------------------------------------
    def run_path(self, path: str, work: list[Workload], namespace: str, captured: dict[str, dict[str, Any]],
                 cleanup: bool = True, pod_annotations: dict[str, str] | None = None) -> tuple[dict[str, Any], Tracker]:
        """One path; its namespace is deleted (and waited for) after, unless it is the last thing that runs.
        POD_ANNOTATIONS (the TrainJob path) reach every pod of every TrainJob (a runtime patch)."""
        names = [w.name for w in work] if path == "trainjob" else [w.name for w in work if w.name in captured]
        tracker = Tracker(names)
        bodies: list[tuple[str, list[tuple[str, dict]]]] = []
        if path == "trainjob":
            runtimes = {r["metadata"]["name"]: r for r in smokemod.golden_runtimes(self.suite.rendered)}
            for w in work:
                body = smokemod.SmokeJob(w.name, runtimes[w.runtime], num_nodes=w.num_nodes,
                                         labels={**self.suite.job_labels, SCALE_LABEL: w.name},
                                         pod_annotations=dict(pod_annotations or {})).manifest(namespace)
                bodies.append((w.name, [(f"/apis/{api.TRAINER_API}/namespaces/{namespace}/trainjobs", body)]))
        elif path == "jobset":
            for name in names:
                js = raw_jobset(captured[name], namespace)
                tracker.records[name].expected = expected_pods(js)
                group = js["apiVersion"]
                bodies.append((name, [(f"/apis/{group}/namespaces/{namespace}/jobsets", js)]))
        else:
            for name in names:
                jobs = raw_jobs(captured[name], namespace)
                tracker.records[name].jobs_total = len(jobs)
                tracker.records[name].expected = sum(int(j["spec"].get("parallelism") or 1) for j in jobs)
                bodies.append((name, [(f"/apis/batch/v1/namespaces/{namespace}/jobs", j) for j in jobs]))

        self.namespace(namespace)
        watches = [Watch(self.api, f"/api/v1/namespaces/{namespace}/pods", tracker.pod, tracker)]
        if path == "trainjob":
            watches.append(Watch(self.api, f"/apis/{api.TRAINER_API}/namespaces/{namespace}/trainjobs",
                                 tracker.trainjob, tracker))
            watches.append(Watch(self.api, f"/apis/{api.JOBSET_API}/namespaces/{namespace}/jobsets",
                                 lambda o, t: tracker.jobset(o, t, owns_completion=False), tracker))
        elif path == "jobset":
            watches.append(Watch(self.api, f"/apis/{api.JOBSET_API}/namespaces/{namespace}/jobsets",
                                 lambda o, t: tracker.jobset(o, t, owns_completion=True), tracker))
        else:
            watches.append(Watch(self.api, f"/apis/batch/v1/namespaces/{namespace}/jobs", tracker.job, tracker))
        for watch in watches:
            watch.start()
        for watch in watches:
            watch.ready.wait(30)
            if watch.error:
                raise UserError(f"cannot watch {watch.path}: {watch.error}")

        self.meter.start()
        stats: CreateStats = {"retries": 0, "errors": 0}
        start = time.monotonic()

        def submit(item: tuple[str, list[tuple[str, dict]]]) -> None:
            name, calls = item
            for api_path, body in calls:
                self._create(api_path, body, stats)
            with tracker.lock:
                tracker.records[name].created = time.monotonic()

        with ThreadPoolExecutor(self.threads) as pool:
            list(pool.map(submit, bodies))
        submitted = time.monotonic() - start
        stall = 180.0
        while not tracker.done.wait(2):
            if time.monotonic() - tracker.last_progress > stall and time.monotonic() - start > stall:
                break  # nothing finished for two minutes: report what is lost
        measured = self.meter.stop()
        measured["controller_errors"] = {ctl.binary_name: errs for ctl in self.provider.controllers.controllers
                                         if (errs := self._new_errors(ctl))}
        for watch in watches:
            watch.stop.set()
        result = self.summarise(path, tracker, start, submitted, stats, measured)
        result["cleanup_seconds"] = self.delete_namespace(namespace) if cleanup else None
        for watch in watches:
            watch.join(timeout=25)
        return result, tracker

    def _new_errors(self, ctl: Any) -> dict[str, int]:
        """Error lines the controller logged since the last call."""
        now = log_errors(ctl.log, top=50)
        seen = self._errors_seen.setdefault(ctl.binary_name, {})
        fresh = {k: v - seen.get(k, 0) for k, v in now.items() if v > seen.get(k, 0)}
        self._errors_seen[ctl.binary_name] = now
        return dict(sorted(fresh.items(), key=lambda kv: -kv[1])[:5])

    def summarise(self, path: str, tracker: Tracker, start: float, submitted: float,
                  stats: CreateStats, measured: dict[str, Any]) -> dict[str, Any]:
        stage: dict[str, list[float]] = {s: [] for s in STAGES}
        ends = []
        for rec in tracker.records.values():
            if rec.created is None:
                continue
            if rec.jobset is not None and path == "trainjob":
                stage["jobset_created"].append(max(0.0, rec.jobset - rec.created))
            n = rec.expected
            for key, times in (("pods_created", rec.pod_added), ("pods_bound", rec.pod_bound),
                               ("pods_running", rec.pod_running)):
                if n and len(times) >= n:
                    stage[key].append(max(0.0, sorted(times.values())[n - 1] - rec.created))
            if rec.complete is not None:
                stage["complete"].append(max(0.0, rec.complete - rec.created))
                ends.append(rec.complete - start)
        completed = len(ends)
        failed = sum(1 for r in tracker.records.values() if r.failed is not None)
        span = max(ends) if ends else 0.0
        return {
            "workloads": len(tracker.records),
            "completed": completed,
            "failed": failed,
            "lost": len(tracker.records) - completed - failed,
            "submit_seconds": round(submitted, 2),
            "create_per_s": round(len(tracker.records) / submitted, 1) if submitted else 0.0,
            "create_retries": stats["retries"],
            "create_errors": stats["errors"],
            **({"last_create_error": stats["last_error"]} if stats.get("last_error") else {}),
            "seconds_to_last_complete": round(span, 2),
            "per_s": round(completed / span, 2) if span else 0.0,
            "pods": sum(len(r.pod_added) for r in tracker.records.values()),
            "watch_events": tracker.events,
            "stages": {k: percentiles(v) for k, v in stage.items() if v},
            "completions_s": [round(t, 2) for t in sorted(ends)],
            "stage_samples_s": {k: [round(x, 3) for x in v] for k, v in stage.items() if v},
            **measured,
        }

    def run_size(self, jobs: int, nodes: int, seed: int, tag: str = "", last: bool = True) -> dict[str, Any]:
        pools = self.scale_nodes(nodes)
        available = [r["metadata"]["name"] for r in smokemod.golden_runtimes(self.suite.rendered)]
        work = workloads(jobs, available, seed)
        captured: dict[str, dict[str, Any]] = {}
        paths_out: dict[str, Any] = {}
        for path in PATHS:
            progress.info(f"  {path} path: {jobs} workloads on {pools['gpu_nodes']} GPU + "
                          f"{pools['cpu_nodes']} CPU nodes")
            result, tracker = self.run_path(path, work, f"scale-{path}{tag}", captured,
                                            cleanup=not (last and path == PATHS[-1]))
            if path == "trainjob":
                captured = tracker.captured
            paths_out[path] = result
            progress.info(f"    {result['completed']}/{result['workloads']} complete, {result['per_s']}/s, "
                          f"{result['seconds_to_last_complete']}s, cleanup {result['cleanup_seconds']}s")
        return record(jobs, pools, work, paths_out, self.settings())

    def settings(self) -> dict[str, Any]:
        """The controller settings that ran (from the chart's ConfigMaps, as the processes read them)."""
        out = {}
        for ctl in self.provider.controllers.controllers:
            cfg = ctl.config
            out[ctl.binary_name] = {
                "clientConnection": cfg.get("clientConnection") or "binary default",
                **({"groupKindConcurrency": dig(cfg, "controller", "groupKindConcurrency")}
                   if "trainer" in ctl.binary_name else {}),
            }
        return out


def record(jobs: int, pools: dict[str, int], work: list[Workload], paths_out: dict[str, Any],
           settings: dict[str, Any]) -> dict[str, Any]:
    tj, js, jb = (paths_out[p] for p in PATHS)
    trainer = "trainer-controller-manager"
    jobset = "jobset-controller"
    mix: dict[str, int] = defaultdict(int)
    for w in work:
        mix[w.runtime] += 1
    return {
        "trainjobs": jobs,
        "nodes": pools["gpu_nodes"],
        **pools,
        "pods": tj["pods"],
        "mix": dict(sorted(mix.items())),
        "nodes_per_job": {"min": 1, "max": MAX_NODES_PER_JOB,
                          "mean": round(statistics.mean(w.num_nodes for w in work), 2)},
        "all_trainjobs_completed": tj["completed"] == jobs,
        "trainjob_per_s": tj["per_s"],
        "raw_jobset_per_s": js["per_s"],
        "raw_job_per_s": jb["per_s"],
        "ratio_vs_jobset": round(tj["per_s"] / js["per_s"], 2) if js["per_s"] else 0.0,
        "ratio_vs_job": round(tj["per_s"] / jb["per_s"], 2) if jb["per_s"] else 0.0,
        "jobset_ratio_vs_job": round(js["per_s"] / jb["per_s"], 2) if jb["per_s"] else 0.0,
        "goal_ratio_vs_jobset": GOAL_RATIO,
        "meets_goal": bool(js["per_s"]) and tj["per_s"] / js["per_s"] >= GOAL_RATIO,
        "stages": tj["stages"],
        "trainer_cpu_s": tj["cpu_s"].get(trainer, 0.0),
        "trainer_peak_rss_mb": tj["peak_rss_mb"].get(trainer, 0.0),
        "jobset_cpu_s": tj["cpu_s"].get(jobset, 0.0),
        "jobset_peak_rss_mb": tj["peak_rss_mb"].get(jobset, 0.0),
        "trainer_cpu_ms_per_trainjob": round(1000 * tj["cpu_s"].get(trainer, 0.0) / jobs, 2),
        "jobset_cpu_ms_per_trainjob": round(1000 * tj["cpu_s"].get(jobset, 0.0) / jobs, 2),
        "settings": settings,
        "paths": paths_out,
    }
