"""Training Operator v1 jobs (kubeflow.org/v1) to TrainJobs on the golden runtimes.

PyTorchJob, MPIJob, XGBoostJob, JAXJob and PaddleJob become one TrainJob each:

- replicas to `trainer.numNodes` (Master and Worker replicas together: both run the training
  process in v1; for MPI the launcher is a node of the golden MPI runtime, so it counts too);
- the training container's image, command, args and env to `trainer`, its resources to
  `trainer.resourcesPerNode`, PyTorchJob `nprocPerNode` / MPIJob `slotsPerWorker` to `numProcPerNode`;
- pod metadata, volumes, volume mounts, security contexts, node selector, affinity, tolerations,
  service account, pull secrets, scheduling gates and grace period to a `runtimePatches` entry
  (the fields Trainer v2.3.0 lets a TrainJob patch), aimed at the runtime's trainer job and container;
- `runPolicy.activeDeadlineSeconds` and `suspend` to the TrainJob's; the Kueue queue to its label.

Everything else is reported per object with the reason it could not be carried over, never dropped
silently. The runtime is chosen among the golden runtimes the environment installs (the chart
rendered with its values) by framework and by the accelerator the containers ask for; nothing here
repeats a runtime's name.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import api, render
from ..jsontypes import dig

V1_GROUP = "kubeflow.org"
TRAINER_API = api.TRAINER_API
GROUP = api.TRAINER_GROUP
ANCESTOR = api.ANCESTOR_LABEL
QUEUE_LABEL = api.QUEUE_LABEL
PATCH_MANAGER = "trainstack.io/convert"
ACCELERATOR_LABEL = "trainstack.io/accelerator"
ALIAS_LABEL = "trainstack.io/alias-of"
PART_OF = api.PART_OF
GPU_RESOURCES = {"nvidia.com/gpu": "nvidia", "amd.com/gpu": "amd"}
DROP_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)


@dataclass(frozen=True)
class Kind:
    kind: str
    replica_key: str  # spec.<key> holds the replica specs
    framework: str  # the mlPolicy key of the golden runtime it lands on
    roles: tuple[str, ...]  # replica types that are training nodes, in node order
    container: str  # the v1 operator's default container name


KINDS = {
    k.kind: k
    for k in (
        Kind("PyTorchJob", "pytorchReplicaSpecs", "torch", ("Master", "Worker"), "pytorch"),
        Kind("MPIJob", "mpiReplicaSpecs", "mpi", ("Launcher", "Worker"), "mpi"),
        Kind("XGBoostJob", "xgbReplicaSpecs", "xgboost", ("Master", "Worker"), "xgboost"),
        Kind("JAXJob", "jaxReplicaSpecs", "jax", ("Worker",), "jax"),
        Kind("PaddleJob", "paddleReplicaSpecs", "torch", ("Master", "Worker"), "paddle"),
    )
}

# Fields of a v1 pod spec a runtimePatches podSpec can carry (TrainJob v2.3.0 PodSpecPatch).
POD_PATCH_FIELDS = ("serviceAccountName", "volumes", "imagePullSecrets", "securityContext", "nodeSelector",
                    "affinity", "tolerations", "schedulingGates", "terminationGracePeriodSeconds")
# Fields of the training container that go to `trainer` or to a ContainerPatch.
CONTAINER_TRAINER_FIELDS = ("image", "command", "args", "env", "resources")
CONTAINER_PATCH_FIELDS = ("volumeMounts", "securityContext")
CONTAINER_REASONS = {
    "ports": "the runtime opens the framework's ports (torch 29500, MPI ssh, ...); v1 port names are not used",
    "imagePullPolicy": "TrainJob has no pull policy; the runtime's applies",
    "workingDir": "TrainJob has no working directory; cd in the command instead",
    "envFrom": "TrainJob env takes single variables only; list them under env",
    "livenessProbe": "runtimePatches cannot set probes",
    "readinessProbe": "runtimePatches cannot set probes",
    "startupProbe": "runtimePatches cannot set probes",
    "lifecycle": "runtimePatches cannot set lifecycle hooks",
    "stdin": "not available on TrainJob containers",
    "tty": "not available on TrainJob containers",
}
POD_REASONS = {
    "priorityClassName": "runtimePatches cannot set it; the golden runtime's priority class (values) applies",
    "hostNetwork": "not allowed: the restricted security rule forbids host networking",
    "hostIPC": "not allowed: the restricted security rule forbids host IPC",
    "hostPID": "not allowed: the restricted security rule forbids the host PID namespace",
    "dnsPolicy": "runtimePatches cannot set it",
    "dnsConfig": "runtimePatches cannot set it",
    "hostAliases": "runtimePatches cannot set it",
    "runtimeClassName": "the GPU runtimes set it from values (runtimes.*.runtimeClassName)",
    "schedulerName": "runtimePatches cannot set it; the cluster's gang scheduling (values: scheduling.gang) applies",
    "restartPolicy": "the runtime decides pod restarts",
    "initContainers": "runtimePatches can only patch the runtime's own init containers (env, mounts, security)",
    "nodeName": "pinning to a node is not carried over; use nodeSelector",
    "shareProcessNamespace": "runtimePatches cannot set it",
    "topologySpreadConstraints": "runtimePatches cannot set it; use affinity",
}
RUN_POLICY_REASONS = {
    "cleanPodPolicy": "TrainJob has no cleanPodPolicy: finished pods stay until the TrainJob is deleted",
    "ttlSecondsAfterFinished": "TrainJob v2.3.0 has no TTL after finishing; delete finished TrainJobs yourself",
    "backoffLimit": "the runtime's Jobs decide retries (runtimePatches cannot set backoffLimit)",
    "managedBy": "v1 managedBy names the v1 operator; the TrainJob is managed by the Trainer controller",
}
SCHEDULING_REASONS = {
    "minAvailable": "gang scheduling is set for the platform (values: scheduling.gang), not per TrainJob",
    "priorityClass": "runtimePatches cannot set a priority class; the runtime's applies",
    "minResources": "gang scheduling is set for the platform (values: scheduling.gang), not per TrainJob",
    "scheduleTimeoutSeconds": "gang scheduling is set for the platform (values: scheduling.gang), not per TrainJob",
}
SPEC_REASONS = {
    "elasticPolicy": "the golden torch runtimes run a fixed number of nodes (no torch elastic in TrainJob v2.3.0)",
    "mpiImplementation": "the golden MPI runtime's implementation (its mlPolicy.mpi) applies",
    "sshAuthMountPath": "the golden MPI runtime sets the ssh mount path",
}
REPLICA_REASONS = {
    "restartPolicy": "the runtime decides pod restarts",
}


@dataclass
class Finding:
    """A field of the v1 object that was not carried over (or was changed), with the reason."""

    field: str
    reason: str
    severity: str = "dropped"  # dropped | changed | error


@dataclass
class Result:
    source: str  # file
    kind: str
    name: str
    namespace: str
    trainjob: dict[str, Any] | None
    runtime: str = ""
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.trainjob is not None and not any(f.severity == "error" for f in self.findings)

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.source, "kind": self.kind, "name": self.name, "namespace": self.namespace,
                "runtime": self.runtime, "converted": self.ok,
                "findings": [f.__dict__ for f in self.findings]}


# -- golden runtimes ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Runtime:
    name: str
    kind: str
    framework: str  # mlPolicy key
    accelerator: str  # cpu | nvidia | amd
    trainer_job: str  # replicatedJob carrying the trainer step
    trainer_container: str
    needs: str = ""  # set for runtimes with extra steps (the data cache initializer): never chosen by default
    launcher_is_node: bool = False


def runtimes_from_objects(objects: list[dict[str, Any]]) -> list[Runtime]:
    """The golden runtimes among rendered objects (the chart's ClusterTrainingRuntimes for one environment):
    name, framework, accelerator, and the replicated job and container that carry the trainer step."""
    found = []
    for doc in objects:
        if not isinstance(doc, dict) or doc.get("kind") not in ("ClusterTrainingRuntime", "TrainingRuntime"):
            continue
        meta, spec = doc.get("metadata") or {}, doc.get("spec") or {}
        labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
        if labels.get(PART_OF[0]) != PART_OF[1] or labels.get(ALIAS_LABEL):
            continue  # not golden, or another name for a runtime already listed
        policy = {k: v for k, v in (spec.get("mlPolicy") or {}).items() if k != "numNodes"}
        jobs = dig(spec, "template", "spec", "replicatedJobs") or []
        trainer = [j for j in jobs if dig(j, "template", "metadata", "labels", default={}).get(ANCESTOR)
                   == "trainer"]
        if not policy or not trainer:
            continue
        containers = dig(trainer[0]["template"], "spec", "template", "spec", "containers") or [{}]
        framework = next(iter(policy))
        found.append(Runtime(
            name=meta["name"], kind=doc["kind"], framework=framework,
            accelerator=labels.get(ACCELERATOR_LABEL) or annotations.get(ACCELERATOR_LABEL, "cpu"),
            trainer_job=trainer[0]["name"], trainer_container=containers[0].get("name", "node"),
            needs="initializer" if len(jobs) > (2 if framework == "mpi" else 1) else "",
            launcher_is_node=bool(dig(policy, "mpi", "runLauncherAsNode")) if framework == "mpi" else False,
        ))
    return found


def load_runtimes(env: str) -> list[Runtime]:
    """The golden runtimes environment `env` installs (the chart rendered with its values)."""
    return runtimes_from_objects(render.render_objects(env))


def choose_runtime(runtimes: list[Runtime], framework: str, accelerator: str) -> Runtime | None:
    """The plain golden runtime for a framework and accelerator (not one that needs an optional component)."""
    fits = [r for r in runtimes if r.framework == framework and r.accelerator == accelerator and not r.needs]
    return fits[0] if fits else None


# -- conversion ---------------------------------------------------------------------------------


def _pod_spec(replica: dict[str, Any]) -> dict[str, Any]:
    return (dig(replica, "template", "spec") or {}) if isinstance(replica, dict) else {}


def _training_container(spec: dict[str, Any], kind: Kind) -> tuple[int, dict[str, Any]]:
    containers = spec.get("containers") or []
    for i, c in enumerate(containers):
        if c.get("name") == kind.container:
            return i, c
    return 0, containers[0] if containers else {}


def _accelerator(container: dict[str, Any]) -> tuple[str, list[str]]:
    res = container.get("resources") or {}
    asked = {k for section in ("limits", "requests") for k in (res.get(section) or {})}
    kinds = sorted({GPU_RESOURCES[k] for k in asked if k in GPU_RESOURCES})
    other = sorted(k for k in asked if "gpu" in k and k not in GPU_RESOURCES)
    return (kinds[0] if kinds else "cpu"), other


def _int(value: Any) -> int | None:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def convert(doc: dict[str, Any], source: str, runtimes: list[Runtime] | Callable[[], list[Runtime]],
            runtime_override: str = "") -> Result:
    """One v1 job to a TrainJob (or to a Result with an error finding when it cannot be).

    `runtimes` may be a function: it is called only once the object is known to be convertible."""
    kind = KINDS[doc["kind"]]
    meta = doc.get("metadata") or {}
    name, namespace = str(meta.get("name") or ""), str(meta.get("namespace") or "")
    result = Result(source, kind.kind, name, namespace, None)
    find = result.findings
    spec = doc.get("spec") or {}
    replicas = spec.get(kind.replica_key)
    if not name:
        find.append(Finding("metadata.name", "the object has no name", "error"))
        return result
    if not isinstance(replicas, dict) or not replicas:
        find.append(Finding(f"spec.{kind.replica_key}", "missing: a v1 job needs its replica specs", "error"))
        return result
    unknown_roles = sorted(set(replicas) - set(kind.roles))
    for role in unknown_roles:
        find.append(Finding(f"spec.{kind.replica_key}.{role}", f"{kind.kind} has no replica type {role} "
                            f"(known: {', '.join(kind.roles)})", "error"))
    roles = [r for r in kind.roles if r in replicas]
    if not roles or unknown_roles:
        return result
    counts = {}
    for role in roles:
        count = _int((replicas[role] or {}).get("replicas", 1))
        if count is None or count < 0:
            find.append(Finding(f"spec.{kind.replica_key}.{role}.replicas", "must be a whole number", "error"))
            return result
        counts[role] = count

    # The node template: the Worker for MPI (the launcher's command goes to the trainer), else the first role.
    base_role = "Worker" if kind.kind == "MPIJob" and "Worker" in roles else roles[0]
    base = replicas[base_role] or {}
    pod = _pod_spec(base)
    index, container = _training_container(pod, kind)
    if not container:
        find.append(Finding(f"spec.{kind.replica_key}.{base_role}.template.spec.containers",
                            "no containers", "error"))
        return result
    base_path = f"spec.{kind.replica_key}.{base_role}.template.spec"
    cpath = f"{base_path}.containers[{index}]"

    command_source = container
    if kind.kind == "MPIJob" and "Launcher" in roles:
        launcher_pod = _pod_spec(replicas["Launcher"] or {})
        _, launcher = _training_container(launcher_pod, kind)
        if launcher.get("command") or launcher.get("args"):
            command_source = launcher

    if callable(runtimes):
        runtimes = runtimes()
    accelerator, odd = _accelerator(container)
    for res in odd:
        find.append(Finding(f"{cpath}.resources", f"accelerator resource {res} has no golden runtime", "error"))
    if runtime_override:
        chosen = next((r for r in runtimes if r.name == runtime_override), None)
        if chosen is None:
            find.append(Finding("--runtime", f"no golden runtime named {runtime_override} in this environment", "error"))
            return result
    else:
        chosen = choose_runtime(runtimes, kind.framework, accelerator)
    if chosen is None:
        have = ", ".join(sorted(f"{r.name} ({r.framework}/{r.accelerator})" for r in runtimes if not r.needs))
        find.append(Finding(f"{cpath}.resources", f"no golden runtime for {kind.framework} on {accelerator} "
                            f"(golden: {have}); pass --runtime NAME to choose one", "error"))
        return result
    if odd:
        return result
    result.runtime = chosen.name

    # numNodes
    if kind.kind == "MPIJob":
        workers = counts.get("Worker", 0)
        num_nodes = workers + (1 if chosen.launcher_is_node and "Launcher" in counts else 0)
        if chosen.launcher_is_node and "Launcher" in counts:
            find.append(Finding(f"spec.{kind.replica_key}.Launcher", f"the launcher is a node of {chosen.name} "
                                f"(runLauncherAsNode): numNodes {num_nodes} = {workers} workers + the launcher; "
                                "the hostfile lists numNodes x numProcPerNode slots: check -np in the command",
                                "changed"))
    else:
        num_nodes = sum(counts.values())
    if num_nodes < 1:
        find.append(Finding(f"spec.{kind.replica_key}", "no replicas: a TrainJob needs at least one node", "error"))
        return result

    trainer: dict[str, Any] = {}
    for key in ("image", "command", "args"):
        value = (command_source if key != "image" else container).get(key)
        if value:
            trainer[key] = value
    if container.get("env"):
        trainer["env"] = container["env"]
    trainer["numNodes"] = num_nodes
    if container.get("resources"):
        trainer["resourcesPerNode"] = container["resources"]
    if kind.kind == "PyTorchJob" and spec.get("nprocPerNode") not in (None, ""):
        nproc = _int(spec["nprocPerNode"])
        if nproc is not None and nproc > 0:
            trainer["numProcPerNode"] = nproc
        else:
            find.append(Finding("spec.nprocPerNode", f"'{spec['nprocPerNode']}' is the torch default (one process "
                                "per GPU, else per CPU): left to the runtime", "changed"))
    if kind.kind == "MPIJob" and spec.get("slotsPerWorker") is not None:
        slots = _int(spec["slotsPerWorker"])
        if slots and slots > 0:
            trainer["numProcPerNode"] = slots
    if kind.kind == "PaddleJob":
        trainer.setdefault("env", [])
        find.append(Finding(f"spec.{kind.replica_key}", f"PaddlePaddle has no golden runtime: runs on {chosen.name}; "
                            "the command gets the torch PET_* variables (PET_MASTER_ADDR, PET_NNODES, PET_NODE_RANK) "
                            "instead of the PADDLE_* ones the v1 operator set: adapt the launch command", "changed"))
        if not trainer["env"]:
            trainer.pop("env")

    for key in sorted(set(container) - {"name", *CONTAINER_TRAINER_FIELDS, *CONTAINER_PATCH_FIELDS}):
        find.append(Finding(f"{cpath}.{key}", CONTAINER_REASONS.get(key, "TrainJob and runtimePatches cannot set it")))
    if command_source is not container:
        for key in ("image",):
            if command_source.get(key) and command_source.get(key) != container.get(key):
                find.append(Finding(f"spec.{kind.replica_key}.Launcher...containers.{key}",
                                    f"the launcher image differs; every node runs {container.get(key)}"))
    others = [c.get("name", f"#{i}") for i, c in enumerate(pod.get("containers") or []) if i != index]
    if others:
        find.append(Finding(f"{base_path}.containers", f"sidecar container(s) {', '.join(others)}: runtimePatches "
                            "can only patch the runtime's own containers"))

    # runtimePatches: pod template metadata, pod spec fields, the container's mounts and security context.
    pod_patch = {k: pod[k] for k in POD_PATCH_FIELDS if k in pod}
    for key in sorted(set(pod) - set(POD_PATCH_FIELDS) - {"containers"}):
        find.append(Finding(f"{base_path}.{key}", POD_REASONS.get(key, "runtimePatches cannot set it")))
    cpatch = {k: container[k] for k in CONTAINER_PATCH_FIELDS if k in container}
    if cpatch:
        pod_patch["containers"] = [{"name": chosen.trainer_container, **cpatch}]
    pod_meta = {k: v for k, v in (dig(base, "template", "metadata") or {}).items()
                if k in ("labels", "annotations") and v}
    for key in sorted(set(dig(base, "template", "metadata") or {}) - {"labels", "annotations"}):
        find.append(Finding(f"spec.{kind.replica_key}.{base_role}.template.metadata.{key}",
                            "runtimePatches carry only labels and annotations"))
    for key in sorted(set(base) - {"replicas", "template"}):
        find.append(Finding(f"spec.{kind.replica_key}.{base_role}.{key}",
                            REPLICA_REASONS.get(key, "not a TrainJob field")))

    # Roles whose template differs from the node template: what of theirs is not carried over.
    for role in roles:
        if role == base_role:
            continue
        other = copy.deepcopy(replicas[role] or {})
        mine = copy.deepcopy(base)
        other.pop("replicas", None)
        mine.pop("replicas", None)
        _, theirs = _training_container(_pod_spec(other), kind)
        _, ours = _training_container(_pod_spec(mine), kind)
        theirs.pop("name", None), ours.pop("name", None)  # container names are not carried over anyway
        if kind.kind == "MPIJob" and role == "Launcher":  # its command is the trainer's
            for key in ("command", "args"):
                theirs.pop(key, None), ours.pop(key, None)
        for diff in _differences(mine, other, f"spec.{kind.replica_key}.{role}"):
            find.append(Finding(diff, f"differs from {base_role}; a TrainJob has one node template "
                                f"(the {base_role}'s is used)"))

    trainjob_spec: dict[str, Any] = {
        "runtimeRef": {"name": chosen.name, "kind": chosen.kind, "apiGroup": GROUP},
        "trainer": trainer,
    }
    if pod_patch or pod_meta:
        template: dict[str, Any] = {}
        if pod_meta:
            template["metadata"] = pod_meta
        if pod_patch:
            template["spec"] = pod_patch
        trainjob_spec["runtimePatches"] = [{
            "manager": PATCH_MANAGER,
            "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
                {"name": chosen.trainer_job, "template": {"spec": {"template": template}}}]}}},
        }]

    run_policy = spec.get("runPolicy") or {}
    if not isinstance(run_policy, dict):
        run_policy = {}
    labels = dict(meta.get("labels") or {})
    if run_policy.get("activeDeadlineSeconds") is not None:
        seconds = _int(run_policy["activeDeadlineSeconds"])
        if seconds and seconds > 0:
            trainjob_spec["activeDeadlineSeconds"] = seconds
    if run_policy.get("suspend") is not None:
        trainjob_spec["suspend"] = bool(run_policy["suspend"])
    for key in sorted(set(run_policy) - {"activeDeadlineSeconds", "suspend", "schedulingPolicy"}):
        find.append(Finding(f"spec.runPolicy.{key}", RUN_POLICY_REASONS.get(key, "not a TrainJob field")))
    scheduling = run_policy.get("schedulingPolicy") or {}
    if scheduling.get("queue"):
        if labels.get(QUEUE_LABEL, scheduling["queue"]) != scheduling["queue"]:
            find.append(Finding("spec.runPolicy.schedulingPolicy.queue", f"the label {QUEUE_LABEL} already names "
                                f"{labels[QUEUE_LABEL]}; kept the label", "changed"))
        labels.setdefault(QUEUE_LABEL, scheduling["queue"])
    for key in sorted(set(scheduling) - {"queue"}):
        find.append(Finding(f"spec.runPolicy.schedulingPolicy.{key}", SCHEDULING_REASONS.get(key, "not carried over")))
    for key in sorted(set(spec) - {kind.replica_key, "runPolicy", "nprocPerNode", "slotsPerWorker"}):
        find.append(Finding(f"spec.{key}", SPEC_REASONS.get(key, "not a TrainJob field")))
    if doc.get("status"):
        find.append(Finding("status", "status is the v1 operator's; the TrainJob starts fresh"))

    out_meta: dict[str, Any] = {"name": name}
    if namespace:
        out_meta["namespace"] = namespace
    if labels:
        out_meta["labels"] = labels
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in DROP_ANNOTATIONS}
    for key in sorted(set(meta.get("annotations") or {}) & set(DROP_ANNOTATIONS)):
        find.append(Finding(f"metadata.annotations.{key}", "kubectl's record of the v1 object; kubectl writes a new one"))
    annotations["trainstack.io/converted-from"] = f"{doc.get('apiVersion')}/{kind.kind}"
    out_meta["annotations"] = annotations
    for key in sorted(set(meta) - {"name", "namespace", "labels", "annotations"}):
        if key in ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink",
                   "ownerReferences", "finalizers", "deletionTimestamp", "generateName"):
            find.append(Finding(f"metadata.{key}", "set by the API server or the v1 operator; not carried over"))
        else:
            find.append(Finding(f"metadata.{key}", "not carried over"))
    result.trainjob = {"apiVersion": TRAINER_API, "kind": "TrainJob", "metadata": out_meta, "spec": trainjob_spec}
    return result


def _differences(a: Any, b: Any, path: str) -> list[str]:
    """Paths (dotted, [i] for lists) where b differs from a."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b)):
            if key not in b:
                continue  # the other role lacks a field the node template has: nothing of its own is lost
            if key not in a:
                out.append(f"{path}.{key}")
            else:
                out += _differences(a[key], b[key], f"{path}.{key}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in _differences(x, y, f"{path}[{i}]")]
    return [] if json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True) else [path]
