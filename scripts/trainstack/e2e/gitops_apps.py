"""Argo CD Applications as `e2e --gitops` reads them (sync, health, the operation's phase, one line
of status), the sync wave of an object, and an object without Argo CD's tracking annotation."""

from __future__ import annotations

from typing import Any


def wave(obj: dict[str, Any]) -> int:
    return int(((obj.get("metadata") or {}).get("annotations") or {}).get("argocd.argoproj.io/sync-wave", "0"))


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
    return ((app.get("status") or {}).get("sync") or {}).get("status") == "Synced"


def healthy(app: dict[str, Any]) -> bool:
    return ((app.get("status") or {}).get("health") or {}).get("status") == "Healthy"


def op_phase(app: dict[str, Any]) -> str:
    return ((app.get("status") or {}).get("operationState") or {}).get("phase", "")


def summary(app: dict[str, Any]) -> str:
    if not app:
        return "no Application"
    status = app.get("status") or {}
    op = status.get("operationState") or {}
    conditions = [f"{c.get('type')}: {c.get('message', '')[:200]}" for c in status.get("conditions") or []]
    unhealthy = [f"{r['kind']}/{r['name']} {(r.get('health') or {}).get('status')}"
                 for r in status.get("resources") or [] if (r.get("health") or {}).get("status") not in (None, "Healthy")]
    return (f"sync {(status.get('sync') or {}).get('status')}, health {(status.get('health') or {}).get('status')}, "
            f"operation {op.get('phase', '-')} {op.get('message', '')[:200]}"
            + (f"; {'; '.join(conditions)}" if conditions else "")
            + (f"; not healthy: {', '.join(unhealthy[:5])}" if unhealthy else ""))

