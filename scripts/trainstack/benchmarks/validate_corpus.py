"""The corpus of `trainstack bench validate`: mixed built-in kinds and custom resources, one document
in INVALID_EVERY broken the way people break them (a wrong type, an unknown field, a CEL violation, a
bad name), written file by file."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import yaml

from .. import api

DOCUMENTS = 10_000
DOCS_PER_FILE = 50
INVALID_EVERY = 20  # one document in 20 is broken


def _meta(kind: str, i: int, namespaced: bool = True) -> dict:
    meta: dict[str, Any] = {"name": f"{kind.lower()}-{i}",
                            "labels": {"app.kubernetes.io/name": f"app-{i % 97}", "app.kubernetes.io/part-of": "bench",
                                       "trainstack.io/team": f"team-{i % 7}"},
                            "annotations": {"trainstack.io/owner": f"owner-{i % 13}@example.com"}}
    if namespaced:
        meta["namespace"] = f"team-{i % 7}"
    return meta


def _container(i: int, name: str = "main") -> dict:
    return {"name": name, "image": f"registry.example.com/app/{name}:1.{i % 10}.0",
            "args": ["--port=8080", f"--replica={i}", "--log-level=info"],
            "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
            "env": [{"name": f"VAR_{j}", "value": str(j * i)} for j in range(6)]
            + [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
            "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
            "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 10},
            "securityContext": {"runAsNonRoot": True, "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]}},
            "volumeMounts": [{"name": "data", "mountPath": "/data"}]}


def _pod_spec(i: int, restart: str = "Always") -> dict:
    return {"serviceAccountName": "runner", "restartPolicy": restart, "containers": [_container(i)],
            "volumes": [{"name": "data", "emptyDir": {}}], "nodeSelector": {"kubernetes.io/os": "linux"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}


def _deployment(i: int) -> dict:
    labels = {"app.kubernetes.io/name": f"app-{i % 97}"}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta("Deployment", i),
            "spec": {"replicas": 2, "selector": {"matchLabels": labels},
                     "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}},
                     "template": {"metadata": {"labels": labels}, "spec": _pod_spec(i)}}}


def _service(i: int) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": _meta("Service", i),
            "spec": {"selector": {"app.kubernetes.io/name": f"app-{i % 97}"},
                     "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}}


def _configmap(i: int) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta("ConfigMap", i),
            "data": {f"key{j}": f"value {j} of {i}" for j in range(8)}}


def _job(i: int) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": _meta("Job", i),
            "spec": {"backoffLimit": 3, "template": {"spec": _pod_spec(i, "Never")}}}


def _rolebinding(i: int) -> dict:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": _meta("RoleBinding", i),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
            "subjects": [{"kind": "ServiceAccount", "name": "runner", "namespace": f"team-{i % 7}"}]}


def _trainjob(i: int) -> dict:
    return {"apiVersion": api.TRAINER_API, "kind": "TrainJob", "metadata": _meta("TrainJob", i),
            "spec": {"runtimeRef": {"name": "torch-distributed"},
                     "initializer": {"dataset": {"storageUri": f"hf://datasets/bench-{i}"}},
                     "trainer": {"numNodes": 1 + i % 4, "image": "pytorch/pytorch:2.5.0",
                                 "command": ["torchrun", "train.py"], "args": ["--epochs", "3"],
                                 "env": [{"name": "SEED", "value": str(i)}],
                                 "resourcesPerNode": {"limits": {"nvidia.com/gpu": 1, "cpu": "4", "memory": "16Gi"}}}}}


def _runtime(i: int) -> dict:
    job = {"name": "node", "template": {"metadata": {"labels": {api.ANCESTOR_LABEL: "trainer"}},
                                        "spec": {"template": {"spec": {"containers": [_container(i, "node")]}}}}}
    return {"apiVersion": api.TRAINER_API, "kind": "TrainingRuntime",
            "metadata": _meta("TrainingRuntime", i),
            "spec": {"mlPolicy": {"numNodes": 1, "torch": {}},
                     "template": {"spec": {"replicatedJobs": [job]}}}}


def _jobset(i: int) -> dict:
    return {"apiVersion": api.JOBSET_API, "kind": "JobSet", "metadata": _meta("JobSet", i),
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": 2,
                                         "template": {"spec": {"parallelism": 2, "completions": 2,
                                                               "template": {"spec": _pod_spec(i, "Never")}}}}]}}


def _application(i: int) -> dict:
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": _meta("Application", i),
            "spec": {"project": "default",
                     "source": {"repoURL": "https://example.com/platform.git", "path": f"overlays/env-{i % 5}",
                                "targetRevision": "main"},
                     "destination": {"server": "https://kubernetes.default.svc", "namespace": api.NAMESPACE},
                     "syncPolicy": {"automated": {"prune": True, "selfHeal": True},
                                    "syncOptions": ["ServerSideApply=true"]}}}


MAKERS = [_deployment, _service, _configmap, _job, _rolebinding, _trainjob, _runtime, _jobset, _application,
          _deployment, _configmap, _trainjob]


BREAKS = ("label-type", "unknown-field", "cel-rule", "name-format")


def _break(doc: dict, i: int) -> tuple[dict, str]:
    """One of the mistakes people make: a wrong type, an unknown field, a CEL violation."""
    how = i % 3
    if how == 0:
        doc["metadata"]["labels"] = {"app.kubernetes.io/name": 12}  # a number where a string goes
        return doc, "label-type"
    if how == 1:
        doc.setdefault("spec", {})["replica"] = 3  # a typo: unknown field
        return doc, "unknown-field"
    if doc["kind"] == "TrainJob":
        doc["spec"]["initializer"]["dataset"]["storageUri"] = "not a uri"  # CEL rule
        return doc, "cel-rule"
    doc["metadata"]["name"] = f"Bad_Name_{i}"  # metadata format
    return doc, "name-format"


def generate(folder: Path, documents: int = DOCUMENTS, seed: int = 7,
             index: list[tuple[str, int, str, str]] | None = None) -> dict[str, int]:
    """Write the corpus; returns counts per kind and how many documents were broken on purpose.

    With `index`, appends (file name, document index, kind, how it was broken or "") per document."""
    rng = random.Random(seed)
    counts: dict[str, int] = {}
    broken = 0
    folder.mkdir(parents=True, exist_ok=True)
    chunk: list[str] = []
    for i in range(documents):  # written file by file: the corpus is never all in memory
        doc, how = rng.choice(MAKERS)(i), ""
        if i % INVALID_EVERY == INVALID_EVERY - 1:
            doc, how = _break(doc, i)
            broken += 1
        counts[doc["kind"]] = counts.get(doc["kind"], 0) + 1
        name = f"manifests-{i // DOCS_PER_FILE:04d}.yaml"
        if index is not None:
            index.append((name, i % DOCS_PER_FILE, doc["kind"], how))
        chunk.append("---\n" + yaml.dump(doc, Dumper=yaml.CSafeDumper, sort_keys=False))
        if len(chunk) == DOCS_PER_FILE or i == documents - 1:
            (folder / name).write_text("".join(chunk))
            chunk = []
    return {"broken": broken, **counts}
