"""What every e2e module shares: the names of the suite's namespaces and labels, the failure it
raises, the record of a step, and how a TrainJob's end reads. Nothing here talks to a cluster."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import api
from ..errors import UserError, output_line
from ..jsontypes import dig

# The suite's old module-level names, kept because the e2e modules and tests read them from here.
RELEASE = api.RELEASE
NAMESPACE = api.NAMESPACE
SMOKE_NS = "trainstack-e2e"
PART_OF = api.PART_OF
FRAMEWORK_LABEL = api.FRAMEWORK_LABEL
GROUP = api.TRAINER_GROUP
VERSION = api.TRAINER_VERSION  # the Trainer API version of TrainJobs and runtimes (v2.3.0)
LWS_GROUP = api.LWS_GROUP
LWS_NAME_LABEL = api.LWS_NAME_LABEL
SMOKE_NODES = 2
MASTER_PORT = "29500"


class SuiteFailure(UserError):
    """A check failed: the message says which and why."""


@dataclass
class Step:
    name: str
    result: str = "not run"  # pass | FAIL | skip | not run
    seconds: float = 0.0
    detail: str = ""
    # what the step found, as fields (nodes, pods, exit codes, figures): the summary JSON carries it and
    # tests assert on it, never on the wording of `detail`
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Outcome:
    """What a step function may return instead of a plain detail line: the line and its fields."""

    detail: str
    data: dict[str, Any] = field(default_factory=dict)


def server_version(kube: Any) -> str:
    """The API server's gitVersion (`kubectl version`), e.g. v1.36.3."""
    return str(kube.kubectl_json("version").get("serverVersion", {}).get("gitVersion", ""))


def terminal_state(trainjob: dict[str, Any] | None) -> tuple[str, str]:
    """('Complete'|'Failed'|'', message) from a TrainJob's conditions."""
    if not trainjob:
        return "", ""
    for cond in dig(trainjob, "status", "conditions") or []:
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
            return cond["type"], f"{cond.get('reason', '')}: {cond.get('message', '')}".strip(": ")
    return "", ""


def said_line(text: str) -> str:
    """The last line of a rejection or failure (kubectl's error), "" when there is none."""
    return output_line(text, markers=(), empty="")


SUMMARY_COLUMNS = ("step", "provider", "result", "seconds", "detail")


def summary_rows(steps: list[Step], provider: str) -> list[tuple[str, str, str, str, str]]:
    """The summary table's rows (SUMMARY_COLUMNS): each step beside the provider it ran on (`kind`, `local`, ...),
    so two runs' tables read side by side."""
    return [(s.name, provider, s.result, f"{s.seconds:.1f}", s.detail[:120]) for s in steps]


# A step of a suite's plan: returns its detail line (or an Outcome with fields too); raises to fail.
StepFn = Callable[[], "str | Outcome | None"]


def unready_pods(pods: list[dict[str, Any]]) -> list[str]:
    """Why each pod that is not Ready is not: unscheduled (the scheduler's message), a container waiting or
    terminated (reason, exit code, restarts and why the last run ended) or running but failing its readiness
    probe. A wait that ends
    in a timeout prints these, so a CI log alone says which of them held the sync up."""
    out = []
    for pod in pods:
        status = pod.get("status") or {}
        conditions = {c.get("type"): c for c in status.get("conditions") or []}
        if dig(conditions, "Ready", "status") == "True" or status.get("phase") == "Succeeded":
            continue
        name = dig(pod, "metadata", "name", default="?")
        scheduled = conditions.get("PodScheduled") or {}
        if scheduled.get("status") == "False":
            out.append(f"{name}: not scheduled: {scheduled.get('message') or scheduled.get('reason') or 'pending'}")
            continue
        why = []
        for container in status.get("containerStatuses") or []:
            state = container.get("state") or {}
            restarts = f", {container.get('restartCount')} restarts" if container.get("restartCount") else ""
            last = (dig(container, "lastState", "terminated") or {})
            if restarts and last:  # why it restarted: OOMKilled, Error and its exit code
                restarts += f" (last: {last.get('reason', '')} exit {last.get('exitCode')})"
            if "waiting" in state:
                waiting = state["waiting"]
                message = f": {waiting['message'][:160]}" if waiting.get("message") else ""
                why.append(f"{container.get('name')} waiting {waiting.get('reason', '')}{message}{restarts}")
            elif "terminated" in state:
                ended = state["terminated"]
                why.append(f"{container.get('name')} terminated {ended.get('reason', '')} "
                           f"exit {ended.get('exitCode')}{restarts}")
            elif not container.get("ready"):
                why.append(f"{container.get('name')} running, not ready{restarts}")
        out.append(f"{name}: {status.get('phase', '?')}: {'; '.join(why) or 'no container status'}")
    return out
