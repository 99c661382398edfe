"""The environment Kubeflow Trainer's framework plugins give a TrainJob's `node` pods, by upstream's rules.

PET_* for torch, JAX_* for JAX and DMLC_* for XGBoost (plugins torch, jax and xgboost of v2.3.0).

What is computed here is the contract between the golden torch runtimes and a training script
(the torch plugin of Trainer v2.3.0): how many nodes, how many processes per node
(from the node's GPU or CPU resources, or trainer.numProcPerNode), the node's rank and the
rendezvous address. `smoke train` starts torchrun with exactly these variables.
"""

from __future__ import annotations

import math
from decimal import Decimal

from . import quantity as quantitymod
from .errors import UserError
from .jsontypes import dig

# Upstream constants (pkg/constants/constants.go, v2.3.0).
CONTAINER_TRAINER_PORT = 29500
NODE = "node"
PET_NNODES = "PET_NNODES"
PET_NPROC_PER_NODE = "PET_NPROC_PER_NODE"
PET_NODE_RANK = "PET_NODE_RANK"
PET_MASTER_ADDR = "PET_MASTER_ADDR"
PET_MASTER_PORT = "PET_MASTER_PORT"
# jax plugin (pkg/runtime/framework/plugins/jax/jax.go)
JAX_NUM_PROCESSES = "JAX_NUM_PROCESSES"
JAX_PROCESS_ID = "JAX_PROCESS_ID"
JAX_COORDINATOR_ADDRESS = "JAX_COORDINATOR_ADDRESS"
# xgboost plugin (pkg/runtime/framework/plugins/xgboost/xgboost.go; the webhook forbids users to set them)
DMLC_TRACKER_URI = "DMLC_TRACKER_URI"
DMLC_TRACKER_PORT = "DMLC_TRACKER_PORT"
DMLC_TASK_ID = "DMLC_TASK_ID"
DMLC_NUM_WORKER = "DMLC_NUM_WORKER"


def quantity(value: object, where: str = "quantity") -> Decimal:
    """A Kubernetes resource quantity ('2', '500m', '2.5', 1) as a Decimal."""
    try:
        return quantitymod.parse(value.strip() if isinstance(value, str) else value)
    except quantitymod.QuantityError:
        raise UserError(f"{where}: {value!r} is not a Kubernetes quantity (e.g. 2, 500m, 1.5)") from None


def _value(q: Decimal) -> int:
    """resource.Quantity.Value(): the integer value, rounded up."""
    return math.ceil(q)


def gpus_per_node(resources: dict) -> int:
    """runtime.GetNumGPUPerNode: a resource whose name contains 'gpu', from requests, else limits."""
    def count(section: str) -> int:
        for name, value in (resources.get(section) or {}).items():
            if "gpu" in str(name).lower():
                return _value(quantity(value, f"resources.{section}.{name}"))
        return 0
    return count("requests") or count("limits")


def cpus_per_node(resources: dict) -> int:
    """torch plugin getNumCPUPerNode: the CPU request, else the CPU limit, rounded up; 0 when neither."""
    request = dig(resources, "requests", "cpu")
    limit = dig(resources, "limits", "cpu")
    if request is not None and quantity(request, "resources.requests.cpu") != 0:
        return _value(quantity(request, "resources.requests.cpu"))
    if limit is not None:
        return _value(quantity(limit, "resources.limits.cpu"))
    return 0


def nproc_per_node(resources: dict, num_proc_per_node: int | None = None) -> str:
    """PET_NPROC_PER_NODE: trainer.numProcPerNode if set; else 'auto', which on a node without GPUs
    becomes max(1, CPUs) (torchrun resolves 'auto' to the GPU count on GPU nodes)."""
    if num_proc_per_node is not None:
        return str(num_proc_per_node)
    if gpus_per_node(resources) == 0:
        return str(max(1, cpus_per_node(resources)))
    return "auto"


def pet_env(trainjob: str, num_nodes: int, node_rank: int, resources: dict | None = None,
            num_proc_per_node: int | None = None, master_addr: str | None = None,
            master_port: int = CONTAINER_TRAINER_PORT) -> dict[str, str]:
    """The PET_* variables the Trainer controller injects into container `node` of pod `node_rank`.

    `resources` is the node's ResourceRequirements ({"requests": {...}, "limits": {...}}): the
    TrainJob's resourcesPerNode, else the runtime's node container. PET_NODE_RANK is the Job
    completion index in a cluster. `master_addr` replaces the headless-Service name off-cluster.
    """
    if num_nodes < 1 or not 0 <= node_rank < num_nodes:
        raise UserError(f"node rank {node_rank} is outside a TrainJob of {num_nodes} node(s)")
    return {
        PET_NNODES: str(num_nodes),
        PET_NPROC_PER_NODE: nproc_per_node(resources or {}, num_proc_per_node),
        PET_NODE_RANK: str(node_rank),
        PET_MASTER_ADDR: master_addr or f"{trainjob}-{NODE}-0-0.{trainjob}",
        PET_MASTER_PORT: str(master_port),
    }


def _check_rank(num_nodes: int, node_rank: int) -> None:
    if num_nodes < 1 or not 0 <= node_rank < num_nodes:
        raise UserError(f"node rank {node_rank} is outside a TrainJob of {num_nodes} node(s)")


def pod0_host(trainjob: str) -> str:
    """Pod 0 of the trainer's `node` job behind the JobSet's headless Service."""
    return f"{trainjob}-{NODE}-0-0.{trainjob}"


def jax_env(trainjob: str, num_nodes: int, node_rank: int, coordinator_host: str | None = None,
            port: int = CONTAINER_TRAINER_PORT) -> dict[str, str]:
    """The JAX_* variables of pod `node_rank`: one process per pod, the coordinator on pod 0.
    JAX_PROCESS_ID is the Job completion index in a cluster; `coordinator_host` replaces pod 0's name."""
    _check_rank(num_nodes, node_rank)
    return {
        JAX_NUM_PROCESSES: str(num_nodes),
        JAX_PROCESS_ID: str(node_rank),
        JAX_COORDINATOR_ADDRESS: f"{coordinator_host or pod0_host(trainjob)}:{port}",
    }


def xgboost_env(trainjob: str, num_nodes: int, node_rank: int, resources: dict | None = None,
                tracker_host: str | None = None, port: int = CONTAINER_TRAINER_PORT) -> dict[str, str]:
    """The DMLC_* variables of pod `node_rank`: the tracker on pod 0, one worker per node on CPU and
    one per GPU otherwise (DMLC_NUM_WORKER = nodes x GPUs; the task id stays the completion index)."""
    _check_rank(num_nodes, node_rank)
    per_node = gpus_per_node(resources or {}) or 1
    return {
        DMLC_TRACKER_URI: tracker_host or pod0_host(trainjob),
        DMLC_TRACKER_PORT: str(port),
        DMLC_TASK_ID: str(node_rank),
        DMLC_NUM_WORKER: str(num_nodes * per_node),
    }
