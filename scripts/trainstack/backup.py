"""`trainstack backup [--out-dir DIR] [--kubeconfig FILE] [--context NAME] [--output text|json]`.

Writes every TrainJob, TrainingRuntime and ClusterTrainingRuntime of the cluster, the teams'
objects (Namespace, ResourceQuota, LimitRange, RoleBindings and, with Kueue, the queues: what
carries the `trainstack.io/team` label) and the Namespaces the TrainJobs and runtimes live in, as
clean manifests: no status, none of the fields the server or a controller sets (uid,
resourceVersion, generation, creationTimestamp, managedFields, ownerReferences, finalizers,
last-applied annotations). `kubectl apply --server-side -f DIR` restores them (docs/upgrade.md):
the files are numbered so that Namespaces come before what lives in them and runtimes before the
TrainJobs that use them. Without --out-dir the manifests go to standard output as one YAML stream.

A restored TrainJob has no status: one that had finished runs again unless it is restored
suspended, which is why TrainJobs are written last and in their own file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from . import api
from . import lock as lockmod
from .errors import UserError, output_line
from .kubectl import Kubectl

GROUP = api.TRAINER_GROUP
TEAM_LABEL = "trainstack.io/team"
# (file, kubectl resource, namespaced, only objects with the team label)
KINDS = (
    ("10-clustertrainingruntimes.yaml", f"clustertrainingruntimes.{GROUP}", False, False),
    ("20-trainingruntimes.yaml", f"trainingruntimes.{GROUP}", True, False),
    ("30-team-objects.yaml", "resourcequotas", True, True),
    ("30-team-objects.yaml", "limitranges", True, True),
    ("30-team-objects.yaml", "rolebindings.rbac.authorization.k8s.io", True, True),
    ("30-team-objects.yaml", f"clusterqueues.{api.KUEUE_GROUP}", False, True),
    ("30-team-objects.yaml", f"localqueues.{api.KUEUE_GROUP}", True, True),
    ("40-trainjobs.yaml", f"trainjobs.{GROUP}", True, False),
)
NAMESPACES_FILE = "00-namespaces.yaml"
SERVER_SET_METADATA = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink",
                       "ownerReferences", "finalizers", "deletionTimestamp", "deletionGracePeriodSeconds")
SERVER_SET_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)
SERVER_SET_LABELS = ("kubernetes.io/metadata.name",)


def clean(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as a user would write it: apiVersion, kind, metadata (name, namespace, labels,
    annotations) and spec (or the kind's other user fields), nothing the server or a controller set."""
    out = {k: v for k, v in obj.items() if k != "status"}
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in SERVER_SET_METADATA}
    for key, drop in (("annotations", SERVER_SET_ANNOTATIONS), ("labels", SERVER_SET_LABELS)):
        kept = {k: v for k, v in (meta.get(key) or {}).items() if k not in drop}
        if kept:
            meta[key] = kept
        else:
            meta.pop(key, None)
    out["metadata"] = meta
    if obj.get("kind") == "Namespace":
        out.pop("spec", None)  # spec.finalizers is the server's
    return out


class Cluster:
    """The pinned kubectl against a kubeconfig/context (what restores the backup, too)."""

    def __init__(self, kubeconfig: str | None, context: str | None, lock: lockmod.Lock | None = None) -> None:
        self.kube = Kubectl(Path(kubeconfig) if kubeconfig else None, context, lock)

    def resources(self) -> set[str]:
        result = self.kube.kubectl("api-resources", "-o", "name", check=False, timeout=60)
        if result.returncode:
            said = output_line(result.stderr, markers=(), empty="kubectl api-resources failed")
            raise UserError(f"cannot reach the cluster: {said}",
                            "is the cluster running and the kube context right (--kubeconfig, --context)?")
        return set(result.stdout.split())

    def items(self, resource: str, namespaced: bool, selector: str | None) -> list[dict[str, Any]]:
        args = ["get", resource, *(["-A"] if namespaced else []), *(["-l", selector] if selector else [])]
        return self.kube.kubectl_json(*args).get("items", [])


def collect(cluster: Cluster) -> dict[str, list[dict[str, Any]]]:
    """File name -> clean manifests, in restore order."""
    have = cluster.resources()
    if f"trainjobs.{GROUP}" not in have:
        raise UserError(f"the cluster has no TrainJob API ({GROUP}): nothing to back up",
                        "is the kube context the cluster where trainstack is installed?")
    files: dict[str, list[dict[str, Any]]] = {NAMESPACES_FILE: []}
    namespaces: set[str] = set()
    team_namespaces: list[dict[str, Any]] = []
    for item in cluster.items("namespaces", False, TEAM_LABEL):
        team_namespaces.append(clean(item))
    for filename, resource, namespaced, team_only in KINDS:
        if resource not in have:
            continue
        objs = [clean(o) for o in cluster.items(resource, namespaced, TEAM_LABEL if team_only else None)]
        objs.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
        files.setdefault(filename, []).extend(objs)
        namespaces |= {o["metadata"]["namespace"] for o in objs if o["metadata"].get("namespace")}
    by_name = {n["metadata"]["name"]: n for n in team_namespaces}
    for name in sorted(namespaces - set(by_name)):
        live = cluster.kube.kubectl_json("get", "namespace", name)
        by_name[name] = clean(live)
    files[NAMESPACES_FILE] = [by_name[n] for n in sorted(by_name)]
    return {k: v for k, v in files.items() if v}


def write(files: dict[str, list[dict[str, Any]]], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, objs in sorted(files.items()):
        path = out / name
        path.write_text("# trainstack backup: restore with kubectl apply --server-side -f <this folder>\n"
                        + yaml.safe_dump_all(objs, sort_keys=False))
        written.append(path)
    return written
