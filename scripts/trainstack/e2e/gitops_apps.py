"""Argo CD Applications as `e2e --gitops` reads them (sync, health, the operation's phase, one line
of status) and the sync wave of an object; the published chart's kustomization."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import api


def wave(obj: dict[str, Any]) -> int:
    return int(((obj.get("metadata") or {}).get("annotations") or {}).get("argocd.argoproj.io/sync-wave", "0"))


def published_kustomization(env: str, repo: str, version: str, base: Path,
                            values: list[str] | None = None) -> dict[str, Any]:
    """An environment that deploys the published chart: git holds this file and its values files only
    (`values`, in Helm's order; by default values.yaml)."""
    values = values or ["values.yaml"]
    chart: dict[str, Any] = {"name": "trainstack", "repo": repo, "version": version, "releaseName": api.RELEASE,
                             "namespace": api.NAMESPACE, "includeCRDs": True, "valuesFile": values[0]}
    if values[1:]:
        chart["additionalValuesFiles"] = values[1:]
    return {
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "components": [str(base)],
        "helmCharts": [chart],
        "labels": [{"pairs": {"trainstack.io/environment": env}, "includeSelectors": False}],
    }


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
