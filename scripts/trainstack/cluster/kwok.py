"""KWOK's part of the local cluster: the fake node pools, upstream's stages, the Ready check.

Nodes are fake: the scheduler places pods for real (resources, taints, selectors), then KWOK plays
the kubelet with upstream's stages (from the pinned, checksum-verified kwok module): pods become
Running, pods owned by a Job succeed, and pods labelled FAIL_LABEL fail.
"""

from __future__ import annotations

import copy
import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import chartpack, paths, tools, yamlio
from .. import lock as lockmod
from ..errors import UserError
from ..jsontypes import dig

# Label that makes KWOK fail a Job pod (upstream's chaos stage); pod-complete is narrowed to skip it.
FAIL_LABEL = "pod-container-running-failed.stage.kwok.x-k8s.io"
GPU_RESOURCE = "nvidia.com/gpu"
POOL_LABEL = "trainstack.io/pool"
# Annotation giving a Job pod its run time on a KWOK node ("20s"; pod-complete's delay, as upstream's general
# stage has it): without it the pod Succeeds as soon as it is Running (upstream's fast stage).
RUN_TIME_ANNOTATION = "pod-complete.stage.kwok.x-k8s.io/delay"
# Upstream stage files (kwok module, kustomize/stage/...) this cluster uses.
STAGE_FILES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
    "pod/chaos/pod-container-running-failed.yaml",
)


@dataclass(frozen=True)
class NodePool:
    """A group of identical fake nodes."""

    name: str
    count: int = 2
    cpu: str = "32"
    memory: str = "128Gi"
    pods: str = "110"
    extended: dict[str, str] = field(default_factory=dict)  # e.g. {"nvidia.com/gpu": "8"}
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[dict[str, str], ...] = ()

    def node_names(self) -> list[str]:
        return [f"{self.name}-{i}" for i in range(self.count)]

    def nodes(self) -> list[dict[str, Any]]:
        resources = {"cpu": self.cpu, "memory": self.memory, "pods": self.pods, **self.extended}
        out = []
        for name in self.node_names():
            labels = {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                POOL_LABEL: self.name,
                **self.labels,
            }
            out.append(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": name,
                        "labels": labels,
                        "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                    },
                    "spec": {"taints": [dict(t) for t in self.taints]} if self.taints else {},
                    "status": {"allocatable": dict(resources), "capacity": dict(resources)},
                }
            )
        return out


def default_pools(
    gpu_labels: dict[str, str] | None = None, gpu_taints: tuple[dict[str, str], ...] | None = None
) -> list[NodePool]:
    """A CPU pool and a GPU pool carrying `nvidia.com/gpu` capacity and the usual GPU taint."""
    taints = (
        gpu_taints if gpu_taints is not None else ({"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"},)
    )
    labels = gpu_labels if gpu_labels is not None else {"nvidia.com/gpu.present": "true"}
    return [
        NodePool("cpu", count=2),
        NodePool("gpu", count=2, extended={GPU_RESOURCE: "8"}, labels=dict(labels), taints=tuple(taints)),
    ]


def stage_documents(lock: lockmod.Lock, host_namespaces: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Upstream's KWOK stages from the pinned, checksum-verified kwok module, adapted here.

    pod-complete skips pods labelled for failure (so the chaos stage alone decides them) and waits the
    run time a pod's RUN_TIME_ANNOTATION gives (none without), and pod-ready skips Deployment pods in
    `host_namespaces` (their controllers run as local processes).
    """
    source = lock.source("kwok")
    cache = paths.cache_dir() / "e2e" / "stages" / f"{source.version}-{source.sum.replace('/', '_')}.json"
    if cache.is_file():
        stages = json.loads(cache.read_text())
    else:
        info = tools.module_info(source.module, source.version)
        zip_path = Path(info["Zip"])
        actual = chartpack.module_h1(zip_path)
        if actual != source.sum:
            raise UserError(
                f"checksum mismatch for {source.module}@{source.version}: lock says {source.sum}, "
                f"the module zip hashes to {actual}",
                "do not use this module; check the lock file",
            )
        prefix = f"{source.module}@{source.version}/kustomize/stage/"
        stages = []
        with zipfile.ZipFile(zip_path) as archive:
            for rel in STAGE_FILES:
                stages.append(yamlio.load(archive.read(prefix + rel)))
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(stages))
    out = []
    for stage in stages:
        name = stage["metadata"]["name"]
        exprs = stage["spec"]["selector"]["matchExpressions"]
        if name == "pod-complete":
            exprs.append({"key": f'.metadata.labels["{FAIL_LABEL}"]', "operator": "NotIn", "values": ["true"]})
            stage["spec"]["delay"] = {"durationMilliseconds": 0,
                                      "durationFrom": {"expressionFrom": f'.metadata.annotations["{RUN_TIME_ANNOTATION}"]'}}
        if name == "pod-ready" and host_namespaces:
            system = copy.deepcopy(stage)
            exprs.append({"key": ".metadata.namespace", "operator": "NotIn", "values": list(host_namespaces)})
            system["metadata"]["name"] = "pod-ready-host-namespaces"
            system["spec"]["selector"]["matchExpressions"] += [
                {"key": ".metadata.namespace", "operator": "In", "values": list(host_namespaces)},
                {"key": ".metadata.ownerReferences.[].kind", "operator": "NotIn", "values": ["ReplicaSet"]},
            ]
            out.append(system)
        out.append(stage)
    return out


def ready_nodes(nodes: dict[str, dict[str, Any]]) -> set[str]:
    """The names of the NODES (by name) whose Ready condition is True."""
    return {name for name, node in nodes.items()
            if any(c.get("type") == "Ready" and c.get("status") == "True"
                   for c in dig(node, "status", "conditions") or [])}
