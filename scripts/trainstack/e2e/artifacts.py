"""What a failed e2e run leaves behind: `artifacts/e2e-<timestamp>/` (gitignored).

logs/: every component's log (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, KWOK,
the controllers, helm); objects/: the YAML of every object of every listable type (Secret values
redacted); summary.txt: the step table. Enough to see why without rerunning.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import yaml

from .. import paths


def folder(stamp: str, root: Path | None = None) -> Path:
    return (root or paths.repo_root() / "artifacts") / f"e2e-{stamp}"


def _redact(obj: dict[str, Any]) -> dict[str, Any]:
    if obj.get("kind") == "Secret":
        obj = dict(obj)
        obj["data"] = {k: "<redacted>" for k in (obj.get("data") or {})}
        obj.pop("stringData", None)
    return obj


def dump_objects(kube: Any, out: Path) -> int:
    """One YAML file per resource type with every object of it; returns how many objects."""
    out.mkdir(parents=True, exist_ok=True)
    listed = kube.kubectl("api-resources", "--verbs=list", "-o", "name", check=False, timeout=30)
    if listed.returncode != 0:
        (out / "ERROR.txt").write_text(listed.stderr)
        return 0
    count = 0
    for resource in sorted(set(listed.stdout.split())):
        result = kube.kubectl("get", resource, "-A", "-o", "json", check=False, timeout=30)
        if result.returncode != 0:
            continue
        items = [_redact(i) for i in json.loads(result.stdout).get("items", [])]
        if not items:
            continue
        for item in items:
            (item.get("metadata") or {}).pop("managedFields", None)
        (out / f"{resource}.yaml").write_text(yaml.safe_dump_all(items, sort_keys=False))
        count += len(items)
    return count


def collect(
    stamp: str, kube: Any | None, logs: dict[str, Path], run_dir: Path, summary: str, root: Path | None = None
) -> Path:
    """Write the artifacts folder for a failed run (under root, default artifacts/) and return it."""
    target = folder(stamp, root)
    (target / "logs").mkdir(parents=True, exist_ok=True)
    for name, path in logs.items():
        if path.is_file():
            shutil.copyfile(path, target / "logs" / f"{name}.log")
    for path in sorted(run_dir.glob("*.log")):
        shutil.copyfile(path, target / "logs" / path.name)
    for path in sorted(run_dir.glob("**/*.yaml")):
        if "kubeconfig" in path.name or path.name.endswith(".kubeconfig"):
            continue
        rel = path.relative_to(run_dir)
        if rel.parts[0] in ("kwok", "controllers") and path.stat().st_size < 2_000_000:
            dest = target / "config" / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dest)
    if kube is not None:
        try:
            dump_objects(kube, target / "objects")
        except Exception as err:  # noqa: BLE001 - a dead API server must not hide the logs we already have
            (target / "objects-ERROR.txt").write_text(f"{type(err).__name__}: {err}\n")
    (target / "summary.txt").write_text(summary)
    return target
