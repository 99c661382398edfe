"""What `trainstack bench scale` collects per workload: timestamps from watch events (one watch per
kind and namespace, never a poll per object), on this host's monotonic clock."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from .. import kubeapi
from ..jsontypes import dig
from .scale_workloads import SCALE_LABEL, expected_pods

JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"


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
            if dig(obj, "spec", "nodeName"):
                rec.pod_bound.setdefault(name, now)
            if dig(obj, "status", "phase") in ("Running", "Succeeded", "Failed"):
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
                conds = {c["type"]: c["status"] for c in dig(obj, "status", "conditions") or []}
                if conds.get("Completed") == "True":
                    self._finish(rec, now)
                elif conds.get("Failed") == "True":
                    self._finish(rec, now, failed=True)

    def trainjob(self, obj: dict[str, Any], now: float) -> None:
        rec = self.records.get(obj["metadata"]["name"])
        if rec is None:
            return
        conds = {c["type"]: c["status"] for c in dig(obj, "status", "conditions") or []}
        with self.lock:
            if conds.get("Complete") == "True":
                self._finish(rec, now)
            elif conds.get("Failed") == "True":
                self._finish(rec, now, failed=True)

    def job(self, obj: dict[str, Any], now: float) -> None:
        rec = self.records.get(dig(obj["metadata"], "labels", SCALE_LABEL, default=""))
        if rec is None:
            return
        conds = {c["type"]: c["status"] for c in dig(obj, "status", "conditions") or []}
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
                for line in kubeapi.stream_lines(resp):
                    event = json.loads(line)
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        if obj.get("code") == 410:
                            rv = self._list()
                        break
                    rv = dig(obj, "metadata", "resourceVersion") or rv
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
