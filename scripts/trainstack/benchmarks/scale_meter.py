"""What `trainstack bench scale` measures beside the workloads: the controllers' and the control
plane's CPU seconds and peak RSS (from /proc), their metric counters over one path, the errors the
controllers logged, and percentiles."""

from __future__ import annotations

import json
import os
import re
import resource
import statistics
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from .. import monitoring

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
            deltas = {key: delta(values, self.before["controllers"][name][key]) for key, values in series.items()}
            work, done = deltas.pop("work_seconds"), deltas.pop("work_items")
            queued, items = deltas.pop("queue_seconds"), deltas.pop("queue_items")
            busy = {q: round(s / wall, 2) for q, s in work.items()}
            got: dict[str, Any] = dict(deltas)  # the counters, then what is derived from them
            got["reconcile_mean_s"] = {q: round(s / done[q], 4) for q, s in work.items() if done.get(q)}
            got["workqueue_busy_fraction"] = busy  # reconcile seconds per second: ~1.0 x workers = saturated
            got["workqueue_mean_wait_s"] = {q: round(s / items[q], 3) for q, s in queued.items() if items.get(q)}
            got["api_requests_per_s"] = round(sum(got["api_requests"].values()) / wall, 1)
            got.update(after["gauges"][name])
            controllers[name] = got
        apiserver: dict[str, Any] = {key: delta(values, self.before["apiserver"][key])
                                     for key, values in after["apiserver"].items()}
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



def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))], 3)

    return {"p50": round(statistics.median(ordered), 3), "p90": at(0.9), "p99": at(0.99), "max": round(ordered[-1], 3)}



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
