"""The workloads of `trainstack bench scale`: a fixed-seed mix of the golden runtimes (1-4 nodes
each), and a JobSet the Trainer created turned into the same workload as a raw JobSet or raw Jobs."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from ..errors import UserError

# The golden runtimes the benchmark submits, with their weight in the mix (GPU runtimes select and
# tolerate the GPU pool). MPI (DeepSpeed, MLX) and TorchTune runtimes are left out: their extra
# objects (SSH Secrets, initializer Jobs and volumes) are not what this measures.
MIX = (
    ("torch-distributed", 2),
    ("torch-distributed-gpu", 4),
    ("jax-distributed", 1),
    ("jax-distributed-gpu", 2),
    ("xgboost-distributed", 1),
)
MAX_NODES_PER_JOB = 4
SEED = 15
PATHS = ("trainjob", "jobset", "job")
STAGES = ("jobset_created", "pods_created", "pods_bound", "pods_running", "complete")
SCALE_LABEL = "trainstack.io/scale-workload"


@dataclass
class Workload:
    name: str
    runtime: str
    num_nodes: int


def workloads(count: int, available: list[str], seed: int = SEED) -> list[Workload]:
    mix = [(name, weight) for name, weight in MIX if name in available]
    if not mix:
        raise UserError(f"the chart renders none of the benchmark's runtimes ({', '.join(n for n, _ in MIX)})")
    rng = random.Random(seed)
    names, weights = [n for n, _ in mix], [w for _, w in mix]
    return [Workload(f"w{i:05d}", rng.choices(names, weights)[0], rng.randint(1, MAX_NODES_PER_JOB))
            for i in range(count)]


def raw_jobset(captured: dict[str, Any], namespace: str) -> dict[str, Any]:
    """A JobSet the Trainer created, as a user would create it directly (no owner, no Trainer labels)."""
    meta = captured["metadata"]
    spec = json.loads(json.dumps(captured["spec"]))
    for rj in spec.get("replicatedJobs", []):
        pod = rj["template"]["spec"]["template"].setdefault("metadata", {})
        pod.setdefault("labels", {})[SCALE_LABEL] = meta["name"]
    return {"apiVersion": captured["apiVersion"], "kind": "JobSet",
            "metadata": {"name": meta["name"], "namespace": namespace, "labels": {SCALE_LABEL: meta["name"]}},
            "spec": spec}


def raw_jobs(captured: dict[str, Any], namespace: str) -> list[dict[str, Any]]:
    """The same JobSet's replicated Jobs, created directly (no JobSet: no Service, no JobSet labels)."""
    name = captured["metadata"]["name"]
    out = []
    for rj in captured["spec"].get("replicatedJobs", []):
        for index in range(int(rj.get("replicas") or 1)):
            spec = json.loads(json.dumps(rj["template"]["spec"]))
            pod = spec["template"].setdefault("metadata", {})
            pod["labels"] = {**{k: v for k, v in (pod.get("labels") or {}).items() if "jobset" not in k},
                             SCALE_LABEL: name}
            out.append({"apiVersion": "batch/v1", "kind": "Job",
                        "metadata": {"name": f"{name}-{rj['name']}-{index}", "namespace": namespace,
                                     "labels": {SCALE_LABEL: name}},
                        "spec": spec})
    return out


def expected_pods(jobset: dict[str, Any]) -> int:
    return sum(int(rj.get("replicas") or 1) * int(rj["template"]["spec"].get("parallelism") or 1)
               for rj in jobset["spec"].get("replicatedJobs", []))
