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
import random
import re
import resource
import shutil
import statistics
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from .. import kubeapi, paths, progress
from .. import lock as lockmod
from ..cluster.local import GPU_RESOURCE
from ..errors import UserError
from . import suite as suitemod

# The golden runtimes the benchmark submits, with their weight in the mix (GPU runtimes select and
# tolerate the GPU pool). MPI (DeepSpeed, MLX) and TorchTune runtimes are left out: their extra
# objects (SSH Secrets, initializer Jobs and volumes) are not what this measures.
MIX = (
    ("torch-distributed", 2),
    ("torch-distributed-gpu", 4),
    ("jax-distributed", 1),
    ("jax-distributed-gpu", 2),
    ("xgboost-distributed", 1),
)
MAX_NODES_PER_JOB = 4
GPU_NODE = {"cpu": "96", "memory": "1024Gi"}  # 8 GPUs, room for 8 one-GPU pods (4 CPU, 32Gi each)
SEED = 15
THREADS = 16
PATHS = ("trainjob", "jobset", "job")
STAGES = ("jobset_created", "pods_created", "pods_bound", "pods_running", "complete")
SCALE_LABEL = "trainstack.io/scale-workload"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
GOAL_RATIO = 0.5
QUICK = {"jobs": 100, "nodes": 10}
FULL = {"jobs": 1000, "nodes": 100}
GROWTH = ((100, 10), (300, 30), (1000, 100))
KWOK_STAGES = ("upstream fast stages (kwok pinned in the lock): pod-ready and pod-complete have no delay: "
               "a bound pod is Running at once and a Job's Running pod Succeeds at once, for all three paths")
SCRAPER = "trainstack-bench-scraper"


# -- the workloads --------------------------------------------------------------------------
@dataclass
class Workload:
    name: str
    runtime: str
    num_nodes: int


def workloads(count: int, available: list[str], seed: int = SEED) -> list[Workload]:
    mix = [(name, weight) for name, weight in MIX if name in available]
    if not mix:
        raise UserError(f"the chart renders none of the benchmark's runtimes ({', '.join(n for n, _ in MIX)})")
    rng = random.Random(seed)
    names, weights = [n for n, _ in mix], [w for _, w in mix]
    return [Workload(f"w{i:05d}", rng.choices(names, weights)[0], rng.randint(1, MAX_NODES_PER_JOB))
            for i in range(count)]


def raw_jobset(captured: dict[str, Any], namespace: str) -> dict[str, Any]:
    """A JobSet the Trainer created, as a user would create it directly (no owner, no Trainer labels)."""
    meta = captured["metadata"]
    spec = json.loads(json.dumps(captured["spec"]))
    for rj in spec.get("replicatedJobs", []):
        pod = rj["template"]["spec"]["template"].setdefault("metadata", {})
        pod.setdefault("labels", {})[SCALE_LABEL] = meta["name"]
    return {"apiVersion": captured["apiVersion"], "kind": "JobSet",
            "metadata": {"name": meta["name"], "namespace": namespace, "labels": {SCALE_LABEL: meta["name"]}},
            "spec": spec}


def raw_jobs(captured: dict[str, Any], namespace: str) -> list[dict[str, Any]]:
    """The same JobSet's replicated Jobs, created directly (no JobSet: no Service, no JobSet labels)."""
    name = captured["metadata"]["name"]
    out = []
    for rj in captured["spec"].get("replicatedJobs", []):
        for index in range(int(rj.get("replicas") or 1)):
            spec = json.loads(json.dumps(rj["template"]["spec"]))
            pod = spec["template"].setdefault("metadata", {})
            pod["labels"] = {**{k: v for k, v in (pod.get("labels") or {}).items() if "jobset" not in k},
                             SCALE_LABEL: name}
            out.append({"apiVersion": "batch/v1", "kind": "Job",
                        "metadata": {"name": f"{name}-{rj['name']}-{index}", "namespace": namespace,
                                     "labels": {SCALE_LABEL: name}},
                        "spec": spec})
    return out


def expected_pods(jobset: dict[str, Any]) -> int:
    return sum(int(rj.get("replicas") or 1) * int(rj["template"]["spec"].get("parallelism") or 1)
               for rj in jobset["spec"].get("replicatedJobs", []))


# -- watching -------------------------------------------------------------------------------
@dataclass
class Record:
    created: float | None = None
    jobset: float | None = None
    expected: int = 0
    pod_added: dict[str, float] = field(default_factory=dict)
    pod_bound: dict[str, float] = field(default_factory=dict)
    pod_running: dict[str, float] = field(default_factory=dict)
    jobs_total: int = 0
    jobs_done: set[str] = field(default_factory=set)
    complete: float | None = None
    failed: float | None = None


class Tracker:
    """Per-workload timestamps from watch events (receive time on this host's monotonic clock)."""

    def __init__(self, names: list[str]) -> None:
        self.records = {n: Record() for n in names}
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.finished = 0
        self.captured: dict[str, dict[str, Any]] = {}
        self.events = 0
        self.last_progress = time.monotonic()

    def _finish(self, rec: Record, now: float, failed: bool = False) -> None:
        if rec.complete is None and rec.failed is None:
            if failed:
                rec.failed = now
            else:
                rec.complete = now
            self.finished += 1
            self.last_progress = now
            if self.finished >= len(self.records):
                self.done.set()

    def pod(self, obj: dict[str, Any], now: float) -> None:
        labels = obj["metadata"].get("labels") or {}
        rec = self.records.get(labels.get(SCALE_LABEL) or labels.get(JOBSET_NAME_LABEL) or "")
        if rec is None:
            return
        name = obj["metadata"]["name"]
        with self.lock:
            rec.pod_added.setdefault(name, now)
            if (obj.get("spec") or {}).get("nodeName"):
                rec.pod_bound.setdefault(name, now)
            if (obj.get("status") or {}).get("phase") in ("Running", "Succeeded", "Failed"):
                rec.pod_running.setdefault(name, now)

    def jobset(self, obj: dict[str, Any], now: float, owns_completion: bool) -> None:
        rec = self.records.get(obj["metadata"]["name"])
        if rec is None:
            return
        with self.lock:
            if rec.jobset is None:
                rec.jobset = now
                rec.expected = expected_pods(obj)
                self.captured[obj["metadata"]["name"]] = obj
            if owns_completion:
                conds = {c["type"]: c["status"] for c in (obj.get("status") or {}).get("conditions") or []}
                if conds.get("Completed") == "True":
                    self._finish(rec, now)
                elif conds.get("Failed") == "True":
                    self._finish(rec, now, failed=True)

    def trainjob(self, obj: dict[str, Any], now: float) -> None:
        rec = self.records.get(obj["metadata"]["name"])
        if rec is None:
            return
        conds = {c["type"]: c["status"] for c in (obj.get("status") or {}).get("conditions") or []}
        with self.lock:
            if conds.get("Complete") == "True":
                self._finish(rec, now)
            elif conds.get("Failed") == "True":
                self._finish(rec, now, failed=True)

    def job(self, obj: dict[str, Any], now: float) -> None:
        rec = self.records.get((obj["metadata"].get("labels") or {}).get(SCALE_LABEL, ""))
        if rec is None:
            return
        conds = {c["type"]: c["status"] for c in (obj.get("status") or {}).get("conditions") or []}
        with self.lock:
            if conds.get("Failed") == "True":
                self._finish(rec, now, failed=True)
            elif conds.get("Complete") == "True":
                rec.jobs_done.add(obj["metadata"]["name"])
                if rec.jobs_total and len(rec.jobs_done) >= rec.jobs_total:
                    self._finish(rec, now)


class Watch(threading.Thread):
    """One watch on a collection (raw JSON lines: no model objects), resumed from the last
    resourceVersion when the server ends it, relisted on 410 Gone."""

    def __init__(self, api: Any, path: str, handler: Any, tracker: Tracker) -> None:
        super().__init__(daemon=True, name=f"watch {path}")
        self.api, self.path, self.handler, self.tracker = api, path, handler, tracker
        self.stop = threading.Event()
        self.ready = threading.Event()
        self.error = ""

    def _get(self, params: list[tuple[str, str]]) -> Any:
        return self.api.call_api(self.path, "GET", query_params=params, auth_settings=["BearerToken"],
                                 header_params={"Accept": "application/json"}, _preload_content=False,
                                 _return_http_data_only=True, _request_timeout=(10, 60))

    def _list(self) -> str:
        body = json.loads(self._get([]).data)
        now = time.monotonic()
        for item in body.get("items") or []:
            self.handler(item, now)
        return body["metadata"]["resourceVersion"]

    def run(self) -> None:
        from kubernetes.watch.watch import iter_resp_lines

        try:
            rv = self._list()
        except Exception as err:  # noqa: BLE001 - reported by the caller
            self.error = str(err)
            self.ready.set()
            return
        self.ready.set()
        while not self.stop.is_set():
            try:
                resp = self._get([("watch", "true"), ("resourceVersion", rv), ("allowWatchBookmarks", "true"),
                                  ("timeoutSeconds", "20")])
                for line in iter_resp_lines(resp):
                    event = json.loads(line)
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        if obj.get("code") == 410:
                            rv = self._list()
                        break
                    rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        self.handler(obj, time.monotonic())
                        self.tracker.events += 1
                    if self.stop.is_set():
                        break
                resp.close()
            except Exception as err:  # noqa: BLE001 - a dropped stream: resume from rv
                if self.stop.is_set():
                    return
                self.error = str(err)[:200]
                time.sleep(0.2)


# -- measuring processes and metrics ---------------------------------------------------------
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def peak_rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return 0.0


def reset_peak(pid: int) -> None:
    """Start a new peak-RSS window (VmHWM) for one of our processes (writing 5 to clear_refs)."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        pass


SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """name -> [(labels, value)] of a Prometheus text exposition."""
    out: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = SAMPLE.match(line)
        if not match:
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        out[match.group(1)].append((dict(LABEL.findall(match.group(2) or "")), value))
    return out


def summed(parsed: dict, name: str, by: tuple[str, ...] = ()) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for labels, value in parsed.get(name, []):
        out["/".join(labels.get(k, "") for k in by) or "all"] += value
    return dict(out)


def delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: round(v - before.get(k, 0.0), 3) for k, v in after.items() if round(v - before.get(k, 0.0), 3)}


CONTROLLER_SERIES = {
    "reconciles": ("controller_runtime_reconcile_total", ("controller", "result")),
    "reconcile_errors": ("controller_runtime_reconcile_errors_total", ("controller",)),
    "workqueue_retries": ("workqueue_retries_total", ("name",)),
    "workqueue_adds": ("workqueue_adds_total", ("name",)),
    "api_requests": ("rest_client_requests_total", ("method", "code")),
    "work_seconds": ("workqueue_work_duration_seconds_sum", ("name",)),
    "queue_seconds": ("workqueue_queue_duration_seconds_sum", ("name",)),
    "queue_items": ("workqueue_queue_duration_seconds_count", ("name",)),
    "work_items": ("workqueue_work_duration_seconds_count", ("name",)),
}
# Gauges read at the end of a path: how many reconcile workers each controller really has.
CONTROLLER_GAUGES = {
    "max_concurrent_reconciles": ("controller_runtime_max_concurrent_reconciles", ("controller",)),
}
APISERVER_SERIES = {
    "requests": ("apiserver_request_total", ("resource", "verb")),
    "by_flow_schema": ("apiserver_flowcontrol_dispatched_requests_total", ("flow_schema",)),
}


class Meter:
    """CPU seconds, peak RSS and metric counters over one path, for the controllers and the control plane."""

    def __init__(self, provider: Any, api: Any, token: str) -> None:
        self.provider, self.api, self.token = provider, api, token
        self.controllers = {ctl.binary_name: ctl for ctl in provider.controllers.controllers}

    def pids(self) -> dict[str, int]:
        out = {name: ctl.pid for name, ctl in self.controllers.items()}
        out.update(self.provider.cluster.pids())
        return out

    def _apiserver(self) -> str:
        resp = self.api.call_api("/metrics", "GET", auth_settings=["BearerToken"], _preload_content=False,
                                 _return_http_data_only=True, _request_timeout=(10, 60))
        return resp.data.decode()

    def _read(self) -> dict[str, Any]:
        from .. import monitoring

        texts = {name: samples(monitoring.scrape(ctl.metrics_url, self.token))
                 for name, ctl in self.controllers.items()}
        api = samples(self._apiserver())
        return {
            "cpu": {name: cpu_seconds(pid) for name, pid in self.pids().items()},
            "self_cpu": sum(resource.getrusage(resource.RUSAGE_SELF)[:2]),
            "controllers": {name: {key: summed(parsed, series, by) for key, (series, by) in CONTROLLER_SERIES.items()}
                            for name, parsed in texts.items()},
            "gauges": {name: {key: summed(parsed, series, by) for key, (series, by) in CONTROLLER_GAUGES.items()}
                       for name, parsed in texts.items()},
            "apiserver": {key: summed(api, series, by) for key, (series, by) in APISERVER_SERIES.items()},
        }

    def start(self) -> None:
        for pid in self.pids().values():
            reset_peak(pid)
        self.before = self._read()
        self.t0 = time.monotonic()

    def stop(self) -> dict[str, Any]:
        after = self._read()
        wall = time.monotonic() - self.t0
        cpu = {k: round(v - self.before["cpu"].get(k, 0.0), 2) for k, v in after["cpu"].items()}
        cpu["bench-client"] = round(after["self_cpu"] - self.before["self_cpu"], 2)
        controllers = {}
        for name, series in after["controllers"].items():
            got = {key: delta(values, self.before["controllers"][name][key]) for key, values in series.items()}
            work, done = got.pop("work_seconds"), got.pop("work_items")
            busy = {q: round(s / wall, 2) for q, s in work.items()}
            got["reconcile_mean_s"] = {q: round(s / done[q], 4) for q, s in work.items() if done.get(q)}
            queued, items = got.pop("queue_seconds"), got.pop("queue_items")
            got["workqueue_busy_fraction"] = busy  # reconcile seconds per second: ~1.0 x workers = saturated
            got["workqueue_mean_wait_s"] = {q: round(s / items[q], 3) for q, s in queued.items() if items.get(q)}
            got["api_requests_per_s"] = round(sum(got["api_requests"].values()) / wall, 1)
            got.update(after["gauges"][name])
            controllers[name] = got
        apiserver = {key: delta(values, self.before["apiserver"][key]) for key, values in after["apiserver"].items()}
        apiserver["requests_total"] = round(sum(apiserver["requests"].values()))
        # every resource and verb, busiest first: a workload's own POSTs tie with many others at N
        apiserver["requests"] = dict(sorted(apiserver["requests"].items(), key=lambda kv: (-kv[1], kv[0])))
        return {
            "seconds": round(wall, 1),
            "cpu_s": cpu,
            "cpu_busy_fraction": round(sum(cpu.values()) / wall / (os.cpu_count() or 1), 2),
            "peak_rss_mb": {name: peak_rss_mb(pid) for name, pid in self.pids().items()},
            "controllers": controllers,
            "apiserver": apiserver,
        }


# -- the run ------------------------------------------------------------------------------
def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))], 3)

    return {"p50": round(statistics.median(ordered), 3), "p90": at(0.9), "p99": at(0.99), "max": round(ordered[-1], 3)}


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
        ns = suitemod.NAMESPACE
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
    def _create(self, path: str, body: dict[str, Any], stats: dict[str, int]) -> None:
        from kubernetes.client.exceptions import ApiException

        for attempt in range(12):
            try:
                self.api.call_api(path, "POST", body=body, auth_settings=["BearerToken"],
                                  header_params={"Content-Type": "application/json", "Accept": "application/json"},
                                  _preload_content=False, _return_http_data_only=True, _request_timeout=(10, 60))
                return
            except ApiException as err:
                if err.status == 409:  # a retry after a timeout that had in fact created it
                    return
                if err.status not in (429, 500, 502, 503, 504) or attempt == 11:
                    stats["errors"] += 1
                    body = (err.body or b"")[:200]
                    stats["last_error"] = f"{err.status} {err.reason}: {body!r}"  # type: ignore[assignment]
                    return
            except Exception as err:  # noqa: BLE001 - connection reset, timeout: try again
                if attempt == 11:
                    stats["errors"] += 1
                    stats["last_error"] = str(err)[:200]  # type: ignore[assignment]
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
                 cleanup: bool = True) -> tuple[dict[str, Any], Tracker]:
        """One path; its namespace is deleted (and waited for) after, unless it is the last thing that runs."""
        names = [w.name for w in work] if path == "trainjob" else [w.name for w in work if w.name in captured]
        tracker = Tracker(names)
        bodies: list[tuple[str, list[tuple[str, dict]]]] = []
        if path == "trainjob":
            runtimes = {r["metadata"]["name"]: r for r in suitemod.golden_runtimes(self.suite.rendered)}
            for w in work:
                body = suitemod.SmokeJob(w.name, runtimes[w.runtime], num_nodes=w.num_nodes,
                                         labels={**self.suite.job_labels, SCALE_LABEL: w.name}).manifest(namespace)
                bodies.append((w.name, [(f"/apis/{suitemod.GROUP}/v1alpha1/namespaces/{namespace}/trainjobs", body)]))
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
            watches.append(Watch(self.api, f"/apis/{suitemod.GROUP}/v1alpha1/namespaces/{namespace}/trainjobs",
                                 tracker.trainjob, tracker))
            watches.append(Watch(self.api, f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets",
                                 lambda o, t: tracker.jobset(o, t, owns_completion=False), tracker))
        elif path == "jobset":
            watches.append(Watch(self.api, f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets",
                                 lambda o, t: tracker.jobset(o, t, owns_completion=True), tracker))
        else:
            watches.append(Watch(self.api, f"/apis/batch/v1/namespaces/{namespace}/jobs", tracker.job, tracker))
        for w in watches:
            w.start()
        for w in watches:
            w.ready.wait(30)
            if w.error:
                raise UserError(f"cannot watch {w.path}: {w.error}")

        self.meter.start()
        stats: dict[str, int] = {"retries": 0, "errors": 0}
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
        for w in watches:
            w.stop.set()
        result = self.summarise(path, tracker, start, submitted, stats, measured)
        result["cleanup_seconds"] = self.delete_namespace(namespace) if cleanup else None
        for w in watches:
            w.join(timeout=25)
        return result, tracker

    def _new_errors(self, ctl: Any) -> dict[str, int]:
        """Error lines the controller logged since the last call."""
        now = log_errors(ctl.log, top=50)
        seen = self._errors_seen.setdefault(ctl.binary_name, {})
        fresh = {k: v - seen.get(k, 0) for k, v in now.items() if v > seen.get(k, 0)}
        self._errors_seen[ctl.binary_name] = now
        return dict(sorted(fresh.items(), key=lambda kv: -kv[1])[:5])

    def summarise(self, path: str, tracker: Tracker, start: float, submitted: float,
                  stats: dict[str, int], measured: dict[str, Any]) -> dict[str, Any]:
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
        available = [r["metadata"]["name"] for r in suitemod.golden_runtimes(self.suite.rendered)]
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
                **({"groupKindConcurrency": (cfg.get("controller") or {}).get("groupKindConcurrency")}
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


# -- output -------------------------------------------------------------------------------
def plot(result: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"trainjob": "tab:blue", "jobset": "tab:orange", "job": "tab:green"}
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5.5))
    width = 0.26
    for i, path in enumerate(PATHS):
        data = result["paths"][path].get("stage_samples_s", {})
        stages = [s for s in STAGES if data.get(s)]
        positions = [STAGES.index(s) + (i - 1) * width for s in stages]
        if stages:
            box = left.boxplot([data[s] for s in stages], positions=positions, widths=width * 0.9,
                               patch_artist=True, showfliers=True, flierprops={"markersize": 2})
            for patch in box["boxes"]:
                patch.set_facecolor(colors[path])
                patch.set_alpha(0.6)
        left.plot([], [], color=colors[path], linewidth=8, alpha=0.6, label=path)
    left.set_xticks(range(len(STAGES)), [s.replace("_", "\n") for s in STAGES])
    left.set_ylabel("seconds after create")
    left.set_title("latency per stage (from the create returning)")
    left.legend()
    for path in PATHS:
        ends = result["paths"][path].get("completions_s", [])
        label = f"{path}: {result['paths'][path]['per_s']}/s"
        right.step(ends, range(1, len(ends) + 1), where="post", color=colors[path], label=label)
    right.set_xlabel("seconds since the first create")
    right.set_ylabel("workloads complete")
    right.set_title("completions over time")
    right.legend()
    fig.suptitle(f"{result['trainjobs']} TrainJobs on {result['nodes']} GPU nodes (KWOK), "
                 f"TrainJob path at {result['ratio_vs_jobset']:.2f}x raw JobSet")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def table(result: dict[str, Any]) -> None:
    rows = []
    for path in PATHS:
        p = result["paths"][path]
        for i, stage in enumerate(s for s in STAGES if s in p["stages"]):
            s = p["stages"][stage]
            head = (path, f"{p['completed']}/{p['workloads']}", p["per_s"]) if i == 0 else ("", "", "")
            rows.append((*head, stage, s["p50"], s["p90"], s["p99"], s["max"]))
    progress.table(f"bench scale: {result['trainjobs']} workloads on {result['nodes']} GPU nodes "
                   f"(seconds after the create; TrainJob path at {result['ratio_vs_jobset']}x raw JobSet)",
                   ["path", "complete", "per s", "stage", "p50", "p90", "p99", "max"], rows)
    ctl_rows = []
    tj = result["paths"]["trainjob"]
    for name in ("trainer-controller-manager", "jobset-controller"):
        m = tj["controllers"].get(name, {})
        busy = ", ".join(f"{k} {v}" for k, v in m.get("workqueue_busy_fraction", {}).items())
        ctl_rows.append((name, tj["cpu_s"].get(name, 0.0), tj["peak_rss_mb"].get(name, 0.0),
                         m.get("api_requests_per_s", 0), int(sum(m.get("reconcile_errors", {}).values())),
                         int(sum(m.get("workqueue_retries", {}).values())), busy))
    progress.table("controllers over the TrainJob path", ["controller", "CPU s", "peak MB", "req/s", "errors",
                                                           "retries", "busy"], ctl_rows)


def log_errors(log: Path, top: int = 5) -> dict[str, int]:
    """The controller's error log lines, counted by message (object names folded): what the errors were."""
    counts: dict[str, int] = defaultdict(int)
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return {}
    for line in lines:
        if '"level":"error"' not in line and '"level":"ERROR"' not in line:
            continue
        try:
            entry = json.loads(line[line.index("{"):])
        except ValueError:
            continue
        text = f"{entry.get('msg', '')}: {entry.get('error', '')}"
        text = re.sub(r"w\d{5}[\w-]*", "<name>", text)
        text = re.sub(r"scale-[a-z]+(-\d+)?", "<namespace>", text)
        counts[text[:240]] += 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1])[:top])


# -- entry point --------------------------------------------------------------------------
def tuned_source(tuned: str) -> Path:
    """`--tuned ENV` (overlays/ENV: the values files its kustomization lists) or `--tuned FILE` (a values file)."""
    from .. import render as rendermod

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
    from .. import render as rendermod

    source = tuned_source(tuned)
    data = rendermod.env_values(tuned) if source.is_dir() else yaml.safe_load(source.read_text())
    trainer = ((data or {}).get("kubeflow-trainer") or {}).get("manager", {}).get("config") or {}
    jobset = ((data or {}).get("jobset") or {}).get("controller", {}).get("clientConnection")
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
    from .providers.local import LocalProvider

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
