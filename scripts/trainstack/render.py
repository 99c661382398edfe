"""Renders an environment's manifests: the pinned kustomize over overlays/ENV, inflating the
umbrella chart with the pinned helm, then sorted into a deterministic order.

`kustomize build --enable-helm overlays/ENV` and `trainstack render --env ENV` therefore give
the same objects; render only orders them and writes them out.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import yaml

from . import deps, helm, paths, tools
from . import lock as lockmod
from .errors import UserError

MARKER = ".trainstack-render"

# Install order: what others depend on first (as Helm and Argo CD order them).
KIND_ORDER = [
    "Namespace", "CustomResourceDefinition", "PriorityClass", "ServiceAccount", "Secret", "ConfigMap",
    "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Service", "Deployment",
    "PodDisruptionBudget", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
    "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "ClusterTrainingRuntime", "TrainingRuntime",
]


def environments() -> list[str]:
    root = paths.overlays_dir()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir()
                  if (p / "kustomization.yaml").is_file() and p.name not in ("base", "argocd"))


def overlay_dir(env: str) -> Path:
    known = environments()
    if env not in known:
        raise UserError(f"unknown environment '{env}'",
                        f"known environments: {', '.join(known) or 'none'} (folders under {paths.overlays_dir()})",
                        exit_code=2)
    return paths.overlays_dir() / env


def sort_key(doc: dict) -> tuple:
    kind = str(doc.get("kind", ""))
    meta = doc.get("metadata") or {}
    rank = KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER)
    return (rank, kind, str(doc.get("apiVersion", "")), str(meta.get("namespace", "")), str(meta.get("name", "")))


def kustomize_build(env: str, lock: lockmod.Lock | None = None) -> str:
    """Raw `kustomize build --enable-helm` output for overlays/ENV, with the pinned helm."""
    lock = lock or lockmod.load()
    directory = overlay_dir(env)
    deps.ensure(lock)
    helm_bin = tools.require("helm", lock)
    result = helm.run(["build", "--enable-helm", "--helm-command", str(helm_bin), str(directory)],
                      lock=lock, binary="kustomize", check=False)
    if result.returncode != 0:
        raise UserError(f"overlays/{env}: kustomize build failed: {helm.first_error_line(result.stderr)}",
                        "fix the overlay or the chart values it sets")
    return result.stdout


def render_objects(env: str, lock: lockmod.Lock | None = None) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(kustomize_build(env, lock)) if isinstance(d, dict) and d]
    return sorted(docs, key=sort_key)


def to_stream(objects: list[dict]) -> str:
    return "".join("---\n" + yaml.safe_dump(o, sort_keys=True, default_flow_style=False) for o in objects)


def file_name(obj: dict) -> str:
    meta = obj.get("metadata") or {}
    scope = meta.get("namespace") or "_cluster"
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", str(meta.get("name", "unnamed")))
    return f"{scope}/{obj.get('kind', 'Unknown')}-{name}.yaml"


def write_dir(objects: list[dict], out: Path) -> list[Path]:
    """One file per object under out; refuses a non-empty folder trainstack did not write."""
    if out.exists():
        if not out.is_dir():
            raise UserError(f"{out} exists and is not a folder", "choose another -o path", exit_code=2)
        if any(out.iterdir()) and not (out / MARKER).exists():
            raise UserError(f"{out} is not empty and was not written by trainstack render",
                            "choose an empty or new folder; nothing was changed", exit_code=2)
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / MARKER).write_text("written by trainstack render; the folder is replaced on the next render\n")
    written = []
    for obj in objects:
        path = out / file_name(obj)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            raise UserError(f"two rendered objects map to {path}")
        path.write_text(yaml.safe_dump(obj, sort_keys=True))
        written.append(path)
    return written
