"""What is in the cluster, for checks that nothing is lost across an upgrade or a fault: a snapshot
of TrainJobs, JobSets, runtimes and CRDs, what changed between two, and a webhook probe that
measures the longest window in which TrainJob creates were rejected."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from typing import Any

from .. import kubeapi
from ..jsontypes import dig

TERMINAL = ("Complete", "Failed")


@dataclass
class Snapshot:
    trainjobs: dict[str, tuple[str, str]]  # ns/name -> (terminal condition type or '', its lastTransitionTime)
    jobsets: set[str]
    runtimes: set[str]  # kind/ns/name
    crd_versions: dict[str, str]  # CRD name -> resourceVersion


def terminal(obj: dict[str, Any]) -> tuple[str, str]:
    for cond in dig(obj, "status", "conditions") or []:
        if cond.get("type") in TERMINAL and cond.get("status") == "True":
            return cond["type"], str(cond.get("lastTransitionTime", ""))
    return "", ""


def _key(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{meta.get('namespace', '')}/{meta['name']}"


def snapshot(kube: Any) -> Snapshot:
    api = kubeapi.for_kube(kube)

    def listed(plural: str) -> list[dict[str, Any]]:
        return kubeapi.items(api, kubeapi.resource(api, plural))

    trainjobs = {_key(t): terminal(t) for t in listed("trainjobs")}
    jobsets = {_key(j) for j in listed("jobsets")}
    runtimes = {f"ClusterTrainingRuntime/{_key(r)}" for r in listed("clustertrainingruntimes")}
    runtimes |= {f"TrainingRuntime/{_key(r)}" for r in listed("trainingruntimes")}
    crds = {c["metadata"]["name"]: c["metadata"].get("resourceVersion", "") for c in listed("customresourcedefinitions")}
    return Snapshot(trainjobs, jobsets, runtimes, crds)


def losses(before: Snapshot, after: Snapshot, expect_gone: frozenset[str] | set[str] = frozenset()) -> list[str]:
    """What the upgrade (or fault) lost or changed that users rely on, as sentences."""
    problems = []
    gone = sorted(set(before.trainjobs) - set(after.trainjobs) - expect_gone)
    if gone:
        problems.append(f"TrainJobs lost: {', '.join(gone)}")
    changed = sorted(k for k, (state, at) in before.trainjobs.items()
                     if state and k in after.trainjobs and after.trainjobs[k] != (state, at))
    if changed:
        problems.append("finished TrainJobs changed status: " + ", ".join(
            f"{k} ({before.trainjobs[k][0]} -> {after.trainjobs[k][0] or 'not finished'})" for k in changed))
    lost_sets = sorted(before.jobsets - after.jobsets)
    if lost_sets:
        problems.append(f"JobSets lost: {', '.join(lost_sets)}")
    lost_runtimes = sorted(before.runtimes - after.runtimes - expect_gone)
    if lost_runtimes:
        problems.append(f"runtimes lost: {', '.join(lost_runtimes)}")
    return problems


def longest_gap(samples: list[tuple[float, bool]]) -> float:
    """Longest time between the first rejected create of a run of rejections and the next admitted one."""
    worst, start = 0.0, None
    for at, ok in samples:
        if not ok and start is None:
            start = at
        elif ok and start is not None:
            worst, start = max(worst, at - start), None
    if start is not None and samples:
        worst = max(worst, samples[-1][0] - start)
    return worst


def conflicts(helm_output: str) -> list[str]:
    """Field-manager conflicts helm reported (server-side apply), one line each."""
    return [ln.strip() for ln in helm_output.splitlines() if "conflict" in ln.lower()]


def rejection(kube: Any, trainjob: dict[str, Any]) -> str:
    """Create TRAINJOB as a server-side dry run (webhooks and policies; nothing stored) through KUBE's client
    connection: '' when admitted, else the API server's one-line reason (or why it did not answer). A kubectl
    process a try cost about 0.1 CPU-s, and the probes below make hundreds in an upgrade."""
    from urllib3.exceptions import HTTPError

    try:
        kubeapi.create(kubeapi.for_kube(kube), trainjob, "trainjobs", dry_run=True, timeout=30)
    except kubeapi.ApiException as err:
        try:
            said = str(json.loads(err.body or "{}").get("message") or err.reason)
        except ValueError:
            said = str(err.reason)
        return f"({err.status}) {said}".splitlines()[0][:300]
    except (OSError, HTTPError) as err:  # refused, reset, timed out (after kubeapi's connection retries)
        return (str(err).splitlines() or [type(err).__name__])[0][:300]
    return ""


class WebhookProbe:
    """`rejection` in a loop, every INTERVAL seconds."""

    def __init__(self, kube: Any, trainjob: dict[str, Any], interval: float = 0.2) -> None:
        self.kube, self.trainjob, self.interval = kube, trainjob, interval
        self.samples: list[tuple[float, bool]] = []
        self.last_error = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            error = rejection(self.kube, self.trainjob)
            self.samples.append((time.monotonic(), not error))
            if error:
                self.last_error = error
            self._stop.wait(self.interval)

    def __enter__(self) -> WebhookProbe:  # noqa: PYI034
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    @property
    def rejected(self) -> int:
        return sum(1 for _, ok in self.samples if not ok)

    @property
    def gap(self) -> float:
        return longest_gap(self.samples)
