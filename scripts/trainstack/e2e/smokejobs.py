"""The smoke TrainJobs: one per golden runtime, and the facts about a runtime the checks read
(its pods' specs, accelerators, node selector, ML policy, the env its framework gets), plus the
chart rendered as `helm install` will create it (the same chart, release, namespace and values)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import deps, helm, paths, yamlio
from .. import lock as lockmod
from .. import render as rendermod
from ..jsontypes import dig
from .base import GROUP, MASTER_PORT, PART_OF, SMOKE_NODES, SMOKE_NS, VERSION


@dataclass
class SmokeJob:
    """One smoke TrainJob: which runtime, what it should look like in the cluster."""

    name: str
    runtime: dict[str, Any]
    num_nodes: int = SMOKE_NODES
    expect: str = "Complete"

    @property
    def runtime_name(self) -> str:
        return self.runtime["metadata"]["name"]

    @property
    def runtime_kind(self) -> str:
        return self.runtime.get("kind", "ClusterTrainingRuntime")

    labels: dict[str, str] = field(default_factory=dict)
    # Where the provider wants the pods (a real node beside KWOK pools): nodeSelector, tolerations.
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    pod_annotations: dict[str, str] = field(default_factory=dict)  # on every pod (KWOK's run time: bench scale)
    command: list[str] = field(default_factory=lambda: [
        "python", "-c", "import os; print('trainstack smoke', os.environ.get('HOSTNAME'))"])
    real: bool = False
    image: str = ""  # the trainer's image instead of the runtime's (spec.trainer.image)
    resources: dict[str, Any] = field(default_factory=dict)  # spec.trainer.resourcesPerNode, when set

    def manifest(self, namespace: str) -> dict[str, Any]:
        job = self._manifest(namespace)
        if self.node_selector or self.tolerations or self.pod_annotations:
            replicated = []
            for rj in dig(self.runtime, "spec", "template", "spec", "replicatedJobs", default=[]):
                if not rj.get("name"):
                    continue
                own = (dig(rj, "template", "spec", "template", "spec") or {})
                pod: dict[str, Any] = {}
                if self.node_selector:
                    pod["nodeSelector"] = {**(own.get("nodeSelector") or {}), **self.node_selector}
                if self.tolerations:  # a patch replaces the list: keep the runtime's own tolerations
                    pod["tolerations"] = [*(own.get("tolerations") or []), *(dict(t) for t in self.tolerations)]
                template: dict[str, Any] = {"spec": pod}
                if self.pod_annotations:
                    template["metadata"] = {"annotations": dict(self.pod_annotations)}
                replicated.append({"name": rj["name"], "template": {"spec": {"template": template}}})
            job["spec"]["runtimePatches"] = [{"manager": "trainstack.io/e2e", "trainingRuntimeSpec": {
                "template": {"spec": {"replicatedJobs": replicated}}}}]
        return job

    def _manifest(self, namespace: str) -> dict[str, Any]:
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "TrainJob",
            "metadata": {
                "name": self.name,
                "namespace": namespace,
                "labels": {"trainstack.io/e2e": "smoke", **self.labels},
            },
            "spec": {
                "runtimeRef": {"name": self.runtime_name, "kind": self.runtime_kind, "apiGroup": GROUP},
                "trainer": {
                    "numNodes": self.num_nodes,
                    "command": list(self.command),
                    **({"image": self.image} if self.image else {}),
                    **({"resourcesPerNode": self.resources} if self.resources else {}),
                },
            },
        }


# -- facts about runtimes ---------------------------------------------------------------------


def pod_specs(runtime: dict[str, Any]) -> list[dict[str, Any]]:
    jobs = dig(runtime, "spec", "template", "spec", "replicatedJobs") or []
    return [dig(rj, "template", "spec", "template", "spec") or {} for rj in jobs]


def accelerators(runtime: dict[str, Any]) -> set[str]:
    """Extended resources with 'gpu' in their name that the runtime's containers ask for."""
    found = set()
    for spec in pod_specs(runtime):
        for container in spec.get("containers", []) + spec.get("initContainers", []):
            res = container.get("resources") or {}
            for section in ("limits", "requests"):
                found |= {k for k in (res.get(section) or {}) if "gpu" in k}
    return found


def node_selector(runtime: dict[str, Any]) -> dict[str, str]:
    """nodeSelector labels plus the first value of required node-affinity `In` terms."""
    labels: dict[str, str] = {}
    for spec in pod_specs(runtime):
        labels.update(spec.get("nodeSelector") or {})
        terms = dig(spec, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution",
                    "nodeSelectorTerms") or []
        for term in terms[:1]:
            for expr in term.get("matchExpressions") or []:
                if expr.get("operator") == "In" and expr.get("values"):
                    labels.setdefault(expr["key"], expr["values"][0])
    return labels


def tolerations(runtime: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for spec in pod_specs(runtime) for t in spec.get("tolerations") or []]


def ml_policies(runtime: dict[str, Any]) -> set[str]:
    return {k for k in (dig(runtime, "spec", "mlPolicy") or {}) if k != "numNodes"}


def job_name(runtime_name: str) -> str:
    """torch-distributed-gpu -> torch-gpu: short names keep pod and Service names well under 63 characters."""
    name = runtime_name.replace("-distributed", "").replace(".", "-")  # TrainJob names are DNS-1035 labels
    return name[:40].rstrip("-") or "smoke"


def expected_env(job: SmokeJob) -> dict[str, str | None]:
    """Env var -> expected value (None: must be present) the controller injects for this runtime's mlPolicy."""
    tj, policies = job.name, ml_policies(job.runtime)
    if "torch" in policies:
        return {
            "PET_NNODES": str(job.num_nodes),
            "PET_NPROC_PER_NODE": None,
            "PET_NODE_RANK": None,
            "PET_MASTER_ADDR": f"{tj}-node-0-0.{tj}",
            "PET_MASTER_PORT": MASTER_PORT,
        }
    if "jax" in policies:
        return {"JAX_NUM_PROCESSES": None, "JAX_PROCESS_ID": None, "JAX_COORDINATOR_ADDRESS": None}
    if "xgboost" in policies:
        return {
            "DMLC_TRACKER_URI": f"{tj}-node-0-0.{tj}",
            "DMLC_TRACKER_PORT": MASTER_PORT,
            "DMLC_TASK_ID": None,
            "DMLC_NUM_WORKER": None,
        }
    if "mpi" in policies:
        return {
            "OMPI_MCA_orte_default_hostfile": None,
            "OMPI_MCA_plm_rsh_args": None,
            "OMPI_MCA_orte_keep_fqdn_hostnames": None,
            "OMPI_MCA_orte_set_default_slots": None,
        }
    return {}


def value_args(env: str, data_cache: bool = False, extra: list[Path] | None = None) -> list[str]:
    """Helm value arguments for `env` (then `extra` files a provider needs); with `data_cache`, the LWS
    data cache on for the smoke namespace."""
    args = rendermod.value_args(env)  # the overlay's values files, in its kustomization's order
    for path in extra or []:
        args += ["-f", str(path)]
    if data_cache:
        args += ["--set", "dataCache.enabled=true", "--set", f"dataCache.namespaces={{{SMOKE_NS}}}"]
    return args


def render(env: str, lock: lockmod.Lock, include_crds: bool = True, data_cache: bool = False,
           extra: list[Path] | None = None) -> list[dict[str, Any]]:
    """What `helm install` will create: `helm template` with the same chart, release, namespace and values."""
    deps.ensure(lock)
    args = helm.template_args(paths.chart_dir(), *value_args(env, data_cache, extra), include_crds=include_crds)
    result = helm.run(args, lock=lock)
    return [d for d in yamlio.load_all(result.stdout) if isinstance(d, dict) and d]


def golden_runtimes(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    key, value = PART_OF
    return [
        o
        for o in objects
        if o.get("kind") == "ClusterTrainingRuntime" and dig(o.get("metadata", {}), "labels", key) == value
    ]


def required_labels(objects: list[dict[str, Any]]) -> dict[str, str]:
    """Labels the rendered policies require on TrainJobs (when that rule is bound), with value 'e2e'."""
    bound = {o["spec"].get("policyName") for o in objects if o.get("kind") == "ValidatingAdmissionPolicyBinding"}
    wanted: dict[str, str] = {}
    for policy in (o for o in objects if o.get("kind") == "ValidatingAdmissionPolicy"):
        if policy["metadata"]["name"] not in bound or "requiredLabels" not in json.dumps(policy["spec"]):
            continue
        param = dig(policy["spec"], "paramKind", "kind")
        for obj in objects:
            if obj.get("kind") == param and "requiredLabels" in (obj.get("data") or {}):
                wanted.update({k: "e2e" for k in obj["data"]["requiredLabels"].split(",") if k})
    return wanted


def message_literals(expression: str) -> list[str]:
    """The fixed text of a CEL messageExpression ('...' + x + '...'), longest first."""
    return sorted(re.findall(r"'([^']{8,})'", expression or ""), key=len, reverse=True)


def is_gpu(runtime: dict[str, Any]) -> bool:
    return bool(accelerators(runtime))
