"""Argo CD Applications as `e2e --gitops` reads them (sync, health, the operation's phase, one line
of status), the sync wave of an object, and an object without Argo CD's tracking annotation."""

from __future__ import annotations

from typing import Any

from ..jsontypes import dig


def wave(obj: dict[str, Any]) -> int:
    return int(dig(obj, "metadata", "annotations", "argocd.argoproj.io/sync-wave", default="0"))


TRACKING = "argocd.argoproj.io/tracking-id"


def strip_tracking(obj: dict[str, Any]) -> dict[str, Any]:
    """OBJ without the tracking annotation Argo CD's repo-server adds to every rendered object but CRDs."""
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    if TRACKING in annotations:
        annotations.pop(TRACKING)
        if not annotations:
            meta.pop("annotations")
    return obj


def synced(app: dict[str, Any]) -> bool:
    return dig(app, "status", "sync", "status") == "Synced"


def healthy(app: dict[str, Any]) -> bool:
    return dig(app, "status", "health", "status") == "Healthy"


def op_phase(app: dict[str, Any]) -> str:
    return dig(app, "status", "operationState", "phase", default="")


def summary(app: dict[str, Any]) -> str:
    if not app:
        return "no Application"
    status = app.get("status") or {}
    op = status.get("operationState") or {}
    conditions = [f"{c.get('type')}: {c.get('message', '')[:200]}" for c in status.get("conditions") or []]
    unhealthy = [f"{r['kind']}/{r['name']} {dig(r, 'health', 'status')}"
                 for r in status.get("resources") or [] if dig(r, "health", "status") not in (None, "Healthy")]
    return (f"sync {dig(status, 'sync', 'status')}, health {dig(status, 'health', 'status')}, "
            f"operation {op.get('phase', '-')} {op.get('message', '')[:200]}"
            + (f"; {'; '.join(conditions)}" if conditions else "")
            + (f"; not healthy: {', '.join(unhealthy[:5])}" if unhealthy else ""))

