"""What `trainstack e2e` checks, whatever brought the cluster (local, kind or existing).

The suite installs the umbrella chart the way a user does (pinned helm, the environment's
values), waits for CRDs, controllers and webhooks, checks that the golden runtimes and policies
the chart rendered are in the cluster, submits one smoke TrainJob per golden runtime and waits for
each to be Complete, checks what users rely on (the JobSet and Jobs, the injected PET_/JAX_/DMLC_/
OMPI_ environment, pod placement), that the image policy acts on a `:latest` image, that a failing
pod ends its TrainJob Failed, and that CRDs and TrainJobs survive `helm uninstall`.
Each step is timed and recorded; the first failure stops the run.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .. import helm, kubeapi, paths, progress, tools, yamlio
from .. import lock as lockmod
from ..cluster.local import FAIL_LABEL
from ..errors import UserError, output_line

RELEASE = "trainstack"
NAMESPACE = "kubeflow-system"
SMOKE_NS = "trainstack-e2e"
PART_OF = ("app.kubernetes.io/part-of", "trainstack")
FRAMEWORK_LABEL = "trainer.kubeflow.org/framework"
GROUP = "trainer.kubeflow.org"
VERSION = "v1alpha1"  # the Trainer API version of TrainJobs and runtimes (v2.3.0)
LWS_GROUP = "leaderworkerset.x-k8s.io"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
SMOKE_NODES = 2
MASTER_PORT = "29500"


class SuiteFailure(UserError):
    """A check failed: the message says which and why."""


@dataclass
class Step:
    name: str
    result: str = "not run"  # pass | FAIL | skip | not run
    seconds: float = 0.0
    detail: str = ""


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
    command: list[str] = field(default_factory=lambda: [
        "python", "-c", "import os; print('trainstack smoke', os.environ.get('HOSTNAME'))"])
    real: bool = False
    image: str = ""  # the trainer's image instead of the runtime's (spec.trainer.image)

    def manifest(self, namespace: str) -> dict[str, Any]:
        job = self._manifest(namespace)
        if self.node_selector or self.tolerations:
            replicated = []
            for rj in (((self.runtime.get("spec") or {}).get("template") or {}).get("spec") or {}).get(
                    "replicatedJobs", []):
                if not rj.get("name"):
                    continue
                own = ((((rj.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec") or {})
                pod: dict[str, Any] = {}
                if self.node_selector:
                    pod["nodeSelector"] = {**(own.get("nodeSelector") or {}), **self.node_selector}
                if self.tolerations:  # a patch replaces the list: keep the runtime's own tolerations
                    pod["tolerations"] = [*(own.get("tolerations") or []), *(dict(t) for t in self.tolerations)]
                replicated.append({"name": rj["name"], "template": {"spec": {"template": {"spec": pod}}}})
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
                },
            },
        }


# -- facts about runtimes ---------------------------------------------------------------------


def pod_specs(runtime: dict[str, Any]) -> list[dict[str, Any]]:
    jobs = (((runtime.get("spec") or {}).get("template") or {}).get("spec") or {}).get("replicatedJobs") or []
    return [(((rj.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec") or {} for rj in jobs]


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
        terms = (
            ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
                "requiredDuringSchedulingIgnoredDuringExecution"
            )
            or {}
        ).get("nodeSelectorTerms") or []
        for term in terms[:1]:
            for expr in term.get("matchExpressions") or []:
                if expr.get("operator") == "In" and expr.get("values"):
                    labels.setdefault(expr["key"], expr["values"][0])
    return labels


def tolerations(runtime: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for spec in pod_specs(runtime) for t in spec.get("tolerations") or []]


def ml_policies(runtime: dict[str, Any]) -> set[str]:
    return {k for k in ((runtime.get("spec") or {}).get("mlPolicy") or {}) if k != "numNodes"}


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
    from .. import render as rendermod

    args = rendermod.value_args(env)  # the overlay's values files, in its kustomization's order
    for path in extra or []:
        args += ["-f", str(path)]
    if data_cache:
        args += ["--set", "dataCache.enabled=true", "--set", f"dataCache.namespaces={{{SMOKE_NS}}}"]
    return args


def render(env: str, lock: lockmod.Lock, include_crds: bool = True, data_cache: bool = False,
           extra: list[Path] | None = None) -> list[dict[str, Any]]:
    """What `helm install` will create: `helm template` with the same chart, release, namespace and values."""
    from .. import deps

    deps.ensure(lock)
    args = ["template", RELEASE, str(paths.chart_dir()), "--namespace", NAMESPACE,
            *value_args(env, data_cache, extra)]
    if include_crds:
        args.append("--include-crds")
    result = helm.run(args, lock=lock)
    return [d for d in yamlio.load_all(result.stdout) if isinstance(d, dict) and d]


def golden_runtimes(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    key, value = PART_OF
    return [
        o
        for o in objects
        if o.get("kind") == "ClusterTrainingRuntime" and (o.get("metadata", {}).get("labels") or {}).get(key) == value
    ]


def required_labels(objects: list[dict[str, Any]]) -> dict[str, str]:
    """Labels the rendered policies require on TrainJobs (when that rule is bound), with value 'e2e'."""
    bound = {o["spec"].get("policyName") for o in objects if o.get("kind") == "ValidatingAdmissionPolicyBinding"}
    wanted: dict[str, str] = {}
    for policy in (o for o in objects if o.get("kind") == "ValidatingAdmissionPolicy"):
        if policy["metadata"]["name"] not in bound or "requiredLabels" not in json.dumps(policy["spec"]):
            continue
        param = (policy["spec"].get("paramKind") or {}).get("kind")
        for obj in objects:
            if obj.get("kind") == param and "requiredLabels" in (obj.get("data") or {}):
                wanted.update({k: "e2e" for k in obj["data"]["requiredLabels"].split(",") if k})
    return wanted


def message_literals(expression: str) -> list[str]:
    """The fixed text of a CEL messageExpression ('...' + x + '...'), longest first."""
    return sorted(re.findall(r"'([^']{8,})'", expression or ""), key=len, reverse=True)


def is_gpu(runtime: dict[str, Any]) -> bool:
    return bool(accelerators(runtime))


class Suite:
    """Runs the steps in order against whatever `provider` brings; records a Step for each."""

    def __init__(
        self,
        provider: Any,
        env: str,
        run_dir: Path,
        lock: lockmod.Lock | None = None,
        keep: bool = False,
        log: Callable[[str], None] | None = None,
        data_cache: bool = False,
    ) -> None:
        self.provider = provider
        self.env = env
        self.data_cache = data_cache
        self.run_dir = run_dir
        self.lock = lock or lockmod.load()
        self.keep = keep
        self.log = log or progress.info
        self.steps: list[Step] = []
        self.kube: Any = None
        self.rendered: list[dict[str, Any]] = []
        self.jobs: list[SmokeJob] = []
        self.failed_job: SmokeJob | None = None
        self.job_labels: dict[str, str] = {}
        self.installed = False
        self.extra_values: list[Path] = []
        # builtImages the suite's workloads run on a real node (beside the node's and controllers')
        self.workload_images: tuple[str, ...] = ("torch-cpu",)

    # -- bookkeeping ------------------------------------------------------------------------
    def step(self, name: str, fn: Callable[[], str | None]) -> None:
        step = Step(name)
        self.steps.append(step)
        start = time.monotonic()
        try:
            with progress.step(name):
                step.detail = fn() or ""
            step.result = "skip" if step.detail.startswith("skipped") else "pass"
        except UserError as err:
            step.result, step.detail = "FAIL", err.message
            raise
        except subprocess.TimeoutExpired as err:
            step.result, step.detail = "FAIL", f"timed out: {err.cmd[:3] if isinstance(err.cmd, list) else err.cmd}"
            raise SuiteFailure(f"{name}: {step.detail}") from None
        finally:
            step.seconds = time.monotonic() - start

    def platform_checks(self) -> list[tuple[str, Callable[[], str | None]]]:
        """What any install must have brought up, however it was installed (helm, Argo CD, nothing)."""
        return [
            ("CRDs established", self.crds_established),
            ("controllers and webhooks ready", self.controllers_ready),
            ("golden runtimes installed", self.runtimes_installed),
            ("policies installed", self.policies_installed),
        ]

    def cluster_steps(self, note: str = "") -> list[tuple[str, Callable[[], str | None]]]:
        """The first two steps of every plan: the chart rendered, the provider's cluster up."""
        return [("render the chart", self.render_chart), (f"cluster ({self.provider.name}{note})", self.cluster_up)]

    def plan(self) -> list[tuple[str, Callable[[], str | None]]]:
        if not self.provider.installs:  # an existing cluster, read-only: check what is there, create nothing
            return [
                *self.cluster_steps(),
                *self.platform_checks(),
                ("smoke TrainJobs admitted (server dry run)", self.smoke_dry_run),
            ]
        return [
            *self.cluster_steps(),
            ("helm install", self.install),
            *self.platform_checks(),
            *([("data cache: LeaderWorkerSet reconciled", self.check_lws)] if self.data_cache else []),
            ("smoke TrainJobs Complete", self.smoke_jobs),
            ("JobSets and Jobs created", self.check_jobsets),
            ("framework env injected", self.check_env),
            ("pod placement", self.check_placement),
            *(self.real_node_steps() if getattr(self.provider, "real", False) else []),
            ("image policy on ':latest'", self.check_policy),
            ("failing pod ends TrainJob Failed", self.check_failure),
            (
                "helm uninstall keeps CRDs and TrainJobs",
                (lambda: "skipped: --keep leaves the release installed") if self.keep else self.uninstall,
            ),
        ]

    def run(self, planned: list[tuple[str, Callable[[], str | None]]] | None = None, hint: str = "") -> None:
        """All steps (of PLANNED, default this suite's plan); raises SuiteFailure (after marking the
        rest 'not run') at the first failure, with the step's hint or else HINT."""
        planned = self.plan() if planned is None else planned
        for i, (name, fn) in enumerate(planned):
            try:
                self.step(name, fn)
            except UserError as err:
                self.steps += [Step(n) for n, _ in planned[i + 1 :]]
                raise SuiteFailure(f"{name}: {err.message}", err.hint or hint) from None

    # -- steps ------------------------------------------------------------------------------
    def render_chart(self) -> str:
        self.extra_values = list(getattr(self.provider, "values_files", list)())
        self.rendered = render(self.env, self.lock, data_cache=self.data_cache, extra=self.extra_values)
        self.job_labels = required_labels(self.rendered)
        runtimes = golden_runtimes(self.rendered)
        if not runtimes:
            raise SuiteFailure(
                f"the chart renders no ClusterTrainingRuntime labelled {PART_OF[0]}={PART_OF[1]} for env {self.env}"
            )
        return f"{len(self.rendered)} objects, runtimes: {', '.join(r['metadata']['name'] for r in runtimes)}"

    def cluster_up(self) -> str:
        self.kube = self.provider.up(self)
        return self.provider.describe()

    def helm_cmd(self, *args: str) -> list[str]:
        return [
            str(tools.require("helm", self.lock)),
            *args,
            "--kubeconfig",
            str(self.provider.kubeconfig),
            *(["--kube-context", self.provider.context] if getattr(self.provider, "context", None) else []),
        ]

    def install(self) -> str:
        cmd = self.helm_cmd(
            "install",
            RELEASE,
            str(paths.chart_dir()),
            "-n",
            NAMESPACE,
            "--create-namespace",
            *value_args(self.env, self.data_cache, self.extra_values),
            "--wait",
            "--timeout",
            "180s",
        )
        if self.data_cache:  # the chart puts the cache initializer's ServiceAccount there
            self.kube.kubectl("create", "namespace", SMOKE_NS, check=False)
        log_path = self.run_dir / "helm-install.log"
        with log_path.open("w") as sink:
            sink.write("$ " + " ".join(cmd) + "\n")
            sink.flush()
            proc = subprocess.Popen(
                cmd, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=helm.env(self.lock)
            )
            try:
                notes = self.provider.while_installing(self, proc) or ""
                rc = proc.wait(timeout=240)
            except BaseException:
                proc.kill()
                proc.wait()
                raise
        self.installed = rc == 0 or self.installed
        if rc != 0:
            raise SuiteFailure(
                f"helm install failed: {helm.first_error_line(log_path.read_text())}", f"log: {log_path}"
            )
        self.installed = True
        cache = " --set dataCache.enabled=true" if self.data_cache else ""
        return " ".join(cmd[1:9]) + cache + (f"; {notes}" if notes else "")

    def crds_established(self) -> str:
        names = [o["metadata"]["name"] for o in self.rendered if o.get("kind") == "CustomResourceDefinition"]
        self.kube.kubectl(
            "wait", "--for=condition=Established", "--timeout=60s", *[f"crd/{n}" for n in names], timeout=90
        )
        return f"{len(names)} CRDs"

    def controllers_ready(self) -> str:
        self.kube.kubectl(
            "wait", "--for=condition=Available", "--timeout=90s", "deployment", "--all", "-n", NAMESPACE, timeout=120
        )
        # A server-side dry run passes the TrainJob through the mutating and validating webhooks.
        probe = SmokeJob("webhook-probe", golden_runtimes(self.rendered)[0], labels=self.job_labels)
        probe = probe.manifest(NAMESPACE)
        deadline = time.monotonic() + 30
        while True:
            result = self.kube.kubectl(
                "create", "--dry-run=server", "-f", "-", input_text=yaml.safe_dump(probe), check=False
            )
            if result.returncode == 0:
                break
            if time.monotonic() > deadline:
                raise SuiteFailure(f"webhooks do not answer a dry-run TrainJob: {_said(result.stderr)}")
            time.sleep(0.5)
        deploys = self.read("deployments", NAMESPACE)
        return f"{len(deploys)} Deployments Available; TrainJob dry run admitted by the webhooks"

    def runtimes_installed(self) -> str:
        wanted = {r["metadata"]["name"]: r for r in golden_runtimes(self.rendered)}
        selector = f"{PART_OF[0]}={PART_OF[1]}"
        items = self.read("clustertrainingruntimes", label_selector=selector)
        have = {r["metadata"]["name"]: r for r in items}
        missing = sorted(set(wanted) - set(have))
        if missing:
            raise SuiteFailure(f"golden runtimes rendered by the chart are not in the cluster: {', '.join(missing)}")
        unlabelled = sorted(n for n, r in have.items() if not (r["metadata"].get("labels") or {}).get(FRAMEWORK_LABEL))
        if unlabelled:
            raise SuiteFailure(f"runtimes without the {FRAMEWORK_LABEL} label: {', '.join(unlabelled)}")
        return ", ".join(sorted(have))

    def policies_installed(self) -> str:
        kinds = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
        rendered = [(o["kind"], o["metadata"]["name"]) for o in self.rendered if o.get("kind") in kinds]
        if not rendered:
            return "skipped: the chart renders no ValidatingAdmissionPolicy for this env"
        have = set()
        for kind, resource in zip(
            kinds, ("validatingadmissionpolicies", "validatingadmissionpolicybindings"), strict=False
        ):
            for item in self.read(resource):
                have.add((kind, item["metadata"]["name"]))
        missing = [f"{k}/{n}" for k, n in rendered if (k, n) not in have]
        if missing:
            raise SuiteFailure(f"rendered policies are not in the cluster: {', '.join(missing)}")
        return (
            f"{sum(1 for k, _ in rendered if k == kinds[0])} policies, "
            f"{sum(1 for k, _ in rendered if k == kinds[1])} bindings"
        )

    def check_lws(self) -> str:
        """What the cache initializer relies on: a LeaderWorkerSet passes LWS's webhooks and its controller acts."""
        images = [
            e.get("value", "")
            for spec in (s for r in golden_runtimes(self.rendered) for s in pod_specs(r))
            for c in spec.get("containers", [])
            for e in c.get("env") or []
            if e.get("name") == "CACHE_IMAGE"
        ]
        if not images:
            raise SuiteFailure("the data cache is on but no golden runtime sets CACHE_IMAGE")
        name = "cache-probe"
        lws = {
            "apiVersion": f"{LWS_GROUP}/v1",
            "kind": "LeaderWorkerSet",
            "metadata": {"name": name, "namespace": SMOKE_NS},
            "spec": {
                "replicas": 1,
                "leaderWorkerTemplate": {
                    "size": 1,
                    "workerTemplate": {"spec": {"containers": [{"name": "cache", "image": images[0]}]}},
                },
            },
        }
        result = self.kube.kubectl("create", "-f", "-", input_text=yaml.safe_dump(lws), check=False)
        if result.returncode != 0:
            raise SuiteFailure(f"LeaderWorkerSet {name} not admitted: {_said(result.stderr)}")
        selector = f"{LWS_NAME_LABEL}={name}"
        # the controller makes the StatefulSet, whose controller makes the pod: watch for the pod
        found = kubeapi.wait_for(self.api(), kubeapi.pods(self.api()), lambda pods: pods, timeout=60,
                                 namespace=SMOKE_NS, label_selector=selector) or {}
        sets = self.read("statefulsets", SMOKE_NS, label_selector=selector)
        if not (sets and found):
            raise SuiteFailure(
                f"LeaderWorkerSet {name}: {len(sets)} StatefulSet(s), {len(found)} pod(s) after 60s: "
                "the LWS controller does not reconcile"
            )
        self.kube.kubectl("delete", "leaderworkerset", name, "-n", SMOKE_NS, "--timeout=60s", timeout=90)
        return f"LeaderWorkerSet {name} admitted; controller made StatefulSet {sets[0]['metadata']['name']} and its pod"

    def smoke_jobs(self) -> str:
        self.kube.kubectl("create", "namespace", SMOKE_NS, check=False)
        runtimes = [r for r in golden_runtimes(self.rendered)]
        self.jobs = [SmokeJob(job_name(r["metadata"]["name"]), r, labels=self.job_labels) for r in runtimes]
        skipped = self.provider.unsupported(self.jobs)
        self.jobs = [j for j in self.jobs if j.name not in skipped]
        for job in self.jobs:
            self.place(job)
        self.kube.kubectl("create", "-f", "-", input_text=yaml.safe_dump_all([j.manifest(SMOKE_NS) for j in self.jobs]))
        self.wait_trainjobs({j.name: "Complete" for j in self.jobs}, timeout=self.provider.job_timeout)
        note = f"; skipped: {', '.join(f'{k} ({v})' for k, v in skipped.items())}" if skipped else ""
        kinds = ", ".join(f"{j.name} ({'real' if j.real else 'simulated'})" for j in self.jobs)
        return f"{len(self.jobs)} TrainJobs Complete: {kinds}{note}"

    def place(self, job: SmokeJob) -> SmokeJob:
        """Ask the provider where the job's pods go (a real node or KWOK) and whether it really runs."""
        placement = getattr(self.provider, "placement", None)
        if placement is not None:
            job.node_selector, job.tolerations = placement(job)
        job.real = bool(getattr(self.provider, "is_real", lambda j: getattr(self.provider, "real_pods", False))(job))
        return job

    # -- the real node ---------------------------------------------------------------------------
    def real_node_steps(self) -> list[tuple[str, Callable[[], str | None]]]:
        return [
            ("SDK TrainJob trains on 2 real pods", self.sdk_training),
            ("checkpoint outlives the pods", self.checkpoint_kept),
            ("worker killed mid-run", self.worker_killed),
            *([("SDK fine-tune (TorchTune) on the GPU pool", self.sdk_finetune)]
              if getattr(self.provider, "nodes", "") == "both" else []),
        ]

    def _torchtune_runtime(self) -> str:
        names = sorted(r["metadata"]["name"] for r in golden_runtimes(self.rendered)
                       if r["metadata"]["name"].startswith("torchtune-"))
        return next((n for n in names if "qwen" in n), names[0] if names else "")

    def sdk_finetune(self) -> str:
        """upstream's BuiltinTrainer(TorchTuneConfig) path, through the SDK, onto the simulated GPU pool."""
        from . import realnode

        sdk = realnode.example_module("sdk_finetune")
        runtime = self._torchtune_runtime()
        if not runtime:
            return f"skipped: env {self.env} renders no TorchTune runtime"
        args = sdk.parse_args(["--runtime", runtime, "--namespace", SMOKE_NS])
        initializer, trainer, options = sdk.build(args)  # what sdk_finetune.submit sends, to this cluster
        name = realnode.client(self.provider.kubeconfig).train(
            runtime=args.runtime, initializer=initializer, trainer=trainer, options=options or None)
        self.wait_trainjobs({name: "Complete"}, timeout=self.provider.job_timeout)
        nodes = {n["metadata"]["name"]: n for n in self.read("nodes")}
        pods = self.read("pods", SMOKE_NS, label_selector=f"jobset.sigs.k8s.io/jobset-name={name}")
        jobs = sorted({(p["metadata"].get("labels") or {}).get("jobset.sigs.k8s.io/replicatedjob-name", "?")
                       for p in pods})
        off_gpu = [p["metadata"]["name"] for p in pods
                   if not any("gpu" in k for k in (nodes.get(p["spec"].get("nodeName") or "", {})
                                                   .get("status", {}).get("capacity") or {}))]
        if off_gpu:
            raise SuiteFailure(f"TorchTune TrainJob {name}: pods not on GPU nodes: {', '.join(off_gpu)}")
        return (f"BuiltinTrainer(TorchTuneConfig) on {runtime} -> {name} Complete (simulated on the KWOK GPU pool); "
                f"steps: {', '.join(jobs)}")

    def worker_killed(self) -> str:
        from . import realnode

        r = realnode.worker_killed(self.kube, self.provider.kubeconfig, timeout=self.provider.job_timeout)
        if r["state"] == "Complete":
            return (f"killed {r['killed']}: the job's pods restarted, resumed from the step-{r['resumed_from']} "
                    f"checkpoint and ended Complete {r['seconds_to_end']}s later")
        return f"killed {r['killed']}: TrainJob {r['name']} ended Failed {r['seconds_to_end']}s later ({r['message'][:160]})"

    def sdk_training(self) -> str:
        from ..cluster import node as nodemod
        from . import realnode

        self.trained = realnode.train_with_sdk(self.kube, self.provider.kubeconfig, nodemod.NODE_NAME,
                                               timeout=int(self.provider.job_timeout))
        r = self.trained
        return (f"TrainerClient().train -> {r['name']} on {RELEASE}'s {realnode.RUNTIME}, {realnode.NODES} pods on "
                f"{nodemod.NODE_NAME}: loss {r['loss_first']:.4f} -> {r['loss_last']:.4f} "
                f"({realnode.STEPS} steps, read with get_job_logs); list_runtimes saw {len(r['runtimes'])} runtimes")

    def checkpoint_kept(self) -> str:
        from .. import images
        from ..cluster import node as nodemod
        from . import realnode

        r = realnode.checkpoint_outlives_pods(self.kube, self.trained["name"], images.reference("torch-cpu", self.lock),
                                              nodemod.NODE_NAME)
        return (f"TrainJob deleted; claim {r['claim']} kept; a fresh pod loaded the step-{r['step']} checkpoint: "
                f"loss {r['trained_loss']:.4f} trained vs {r['untrained_loss']:.4f} untrained")

    def smoke_dry_run(self) -> str:
        """Each smoke TrainJob through admission (webhooks, policies) without creating it."""
        names = []
        for runtime in golden_runtimes(self.rendered):
            job = SmokeJob(job_name(runtime["metadata"]["name"]), runtime, labels=self.job_labels)
            result = self.kube.kubectl(
                "create", "--dry-run=server", "-f", "-", input_text=yaml.safe_dump(job.manifest("default")), check=False
            )
            if result.returncode != 0:
                raise SuiteFailure(
                    f"TrainJob {job.name} (runtime {job.runtime_name}) is not admitted: {_said(result.stderr)}"
                )
            names.append(job.name)
        return f"{len(names)} smoke TrainJobs admitted: {', '.join(names)} (read-only: pass --install to run them)"

    def api(self) -> Any:
        """The kubernetes client for this suite's cluster (made once; the kubeconfig of self.kube)."""
        return kubeapi.for_kube(self.kube)

    def read(self, plural: str, namespace: str | None = None, **selectors: Any) -> list[dict[str, Any]]:
        """One read of PLURAL (a resource of kubeapi.API_VERSIONS) through the kubernetes client."""
        return kubeapi.items(self.api(), kubeapi.resource(self.api(), plural, namespace), **selectors)

    def wait_trainjobs(self, expected: dict[str, str], timeout: float) -> dict[str, dict]:
        """Until each named TrainJob has its expected terminal condition; fails on the other one or on timeout.
        Watches the TrainJobs (the kubernetes client) rather than listing them over and over."""
        start = last_report = time.monotonic()
        trainjobs = kubeapi.custom_objects(self.api(), GROUP, VERSION, "trainjobs", SMOKE_NS)
        states: dict[str, tuple[str | None, str]] = {}
        for items in kubeapi.snapshots(self.api(), trainjobs, timeout=timeout):
            states = {name: terminal_state(items.get(name)) for name in expected}
            for name, (state, message) in states.items():
                if state and state != expected[name]:
                    raise SuiteFailure(
                        f"TrainJob {SMOKE_NS}/{name} ended {state}, expected {expected[name]}: {message}"
                    )
            if all(states[n][0] == want for n, want in expected.items()):
                return dict(items)
            if time.monotonic() - last_report > 5:
                done = sum(1 for n, want in expected.items() if states[n][0] == want)
                self.log(f"  waiting: {done}/{len(expected)} TrainJobs done")
                last_report = time.monotonic()
        late = [n for n, want in expected.items() if states.get(n, (None,))[0] != want]
        raise SuiteFailure(
            f"TrainJobs not {'/'.join(sorted(set(expected.values())))} within {time.monotonic() - start:.0f}s: "
            + ", ".join(f"{n} ({self.why_pending(n)})" for n in late)
        )

    def why_pending(self, name: str) -> str:
        pods = self.read("pods", SMOKE_NS, label_selector=f"jobset.sigs.k8s.io/jobset-name={name}")
        if not pods:
            jobsets = self.read("jobsets", SMOKE_NS, field_selector=f"metadata.name={name}")
            return "no pods" + ("" if jobsets else ", no JobSet")
        phases: dict[str, int] = {}
        for pod in pods:
            phase = pod.get("status", {}).get("phase", "?")
            for cond in pod.get("status", {}).get("conditions", []):
                if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                    phase = f"Unschedulable: {cond.get('message', '')[:120]}"
            phases[phase] = phases.get(phase, 0) + 1
        return ", ".join(f"{n} pod(s) {p}" for p, n in phases.items())

    def check_jobsets(self) -> str:
        jobsets = {j["metadata"]["name"]: j for j in self.read("jobsets", SMOKE_NS)}
        jobs = self.read("jobs", SMOKE_NS)
        total = 0
        for job in self.jobs:
            jobset = jobsets.get(job.name)
            if jobset is None:
                raise SuiteFailure(f"TrainJob {job.name}: no JobSet {SMOKE_NS}/{job.name}")
            owners = [o for o in jobset["metadata"].get("ownerReferences", []) if o.get("kind") == "TrainJob"]
            if not owners or owners[0].get("name") != job.name or not owners[0].get("controller"):
                raise SuiteFailure(f"JobSet {job.name} is not controlled by TrainJob {job.name}")
            mine = [
                j for j in jobs if (j["metadata"].get("labels") or {}).get("jobset.sigs.k8s.io/jobset-name") == job.name
            ]
            wanted = {rj["name"] for rj in jobset["spec"]["replicatedJobs"]}
            got = {(j["metadata"].get("labels") or {}).get("jobset.sigs.k8s.io/replicatedjob-name") for j in mine}
            if wanted - got:
                raise SuiteFailure(f"JobSet {job.name}: no Job for replicatedJob(s) {', '.join(sorted(wanted - got))}")
            total += len(mine)
        return f"{len(self.jobs)} JobSets owned by their TrainJobs, {total} Jobs"

    def check_env(self) -> str:
        pods = self.read("pods", SMOKE_NS)
        checked = 0
        for job in self.jobs:
            want = expected_env(job)
            if not want:
                continue
            mine = [
                p for p in pods if (p["metadata"].get("labels") or {}).get("jobset.sigs.k8s.io/jobset-name") == job.name
            ]
            carriers = [
                p
                for p in mine
                if any(set(want) <= {e["name"] for e in c.get("env") or []} for c in p["spec"]["containers"])
            ]
            if not carriers:
                have = sorted({e["name"] for p in mine for c in p["spec"]["containers"] for e in c.get("env") or []})
                raise SuiteFailure(
                    f"TrainJob {job.name}: no pod has all of {', '.join(want)} (pods have: "
                    f"{', '.join(have) or 'no env'})"
                )
            for pod in carriers:
                for container in pod["spec"]["containers"]:
                    env = {e["name"]: e for e in container.get("env") or []}
                    if not set(want) <= set(env):
                        continue
                    for var, value in want.items():
                        if value is not None and env[var].get("value") != value:
                            raise SuiteFailure(
                                f"TrainJob {job.name}: pod {pod['metadata']['name']} has "
                                f"{var}={env[var].get('value')!r}, expected {value!r}"
                            )
                    checked += 1
            if "torch" in ml_policies(job.runtime) and len(carriers) != job.num_nodes:
                raise SuiteFailure(f"TrainJob {job.name}: {len(carriers)} torch pods, expected {job.num_nodes}")
            if "mpi" in ml_policies(job.runtime):
                for kind, suffix in (("configmaps", "-mpi-hostfile"), ("secrets", "-mpi-ssh-auth")):
                    if not self.read(kind, SMOKE_NS, field_selector=f"metadata.name={job.name + suffix}"):
                        raise SuiteFailure(f"TrainJob {job.name}: no {kind} {job.name + suffix}")
        return f"{checked} containers carry their framework's env"

    def check_placement(self) -> str:
        nodes = {n["metadata"]["name"]: n for n in self.read("nodes")}
        pods = self.read("pods", SMOKE_NS)
        counts = {"gpu": 0, "cpu": 0}
        for job in self.jobs:
            mine = [
                p for p in pods if (p["metadata"].get("labels") or {}).get("jobset.sigs.k8s.io/jobset-name") == job.name
            ]
            wanted = accelerators(job.runtime)
            selector = node_selector(job.runtime)
            for pod in mine:
                node = nodes.get(pod["spec"].get("nodeName") or "")
                if node is None:
                    raise SuiteFailure(f"TrainJob {job.name}: pod {pod['metadata']['name']} is not on a node")
                capacity = node.get("status", {}).get("capacity") or {}
                labels = node["metadata"].get("labels") or {}
                gpu_node = any("gpu" in k and str(v) not in ("0", "") for k, v in capacity.items())
                if wanted:
                    if not all(r in capacity for r in wanted):
                        raise SuiteFailure(
                            f"TrainJob {job.name}: pod {pod['metadata']['name']} on "
                            f"{node['metadata']['name']}, which has no {', '.join(sorted(wanted))}"
                        )
                    bad = {k: v for k, v in selector.items() if labels.get(k) != v}
                    if bad:
                        raise SuiteFailure(f"TrainJob {job.name}: pod on {node['metadata']['name']} lacks labels {bad}")
                    counts["gpu"] += 1
                else:
                    if gpu_node and self.provider.name == "local":
                        raise SuiteFailure(
                            f"TrainJob {job.name} (CPU runtime): pod {pod['metadata']['name']} "
                            f"landed on GPU node {node['metadata']['name']}"
                        )
                    counts["cpu"] += 1
        return f"{counts['gpu']} GPU-runtime pods on GPU nodes, {counts['cpu']} CPU-runtime pods on CPU nodes"

    def _image_policy_bindings(self) -> list[tuple[dict, dict]]:
        policies = {o["metadata"]["name"]: o for o in self.rendered if o.get("kind") == "ValidatingAdmissionPolicy"}
        out = []
        for binding in (o for o in self.rendered if o.get("kind") == "ValidatingAdmissionPolicyBinding"):
            policy = policies.get(binding["spec"].get("policyName", ""))
            if policy is None:
                continue
            text = json.dumps(policy["spec"].get("validations", []))
            if "latest" in text:
                out.append((policy, binding))
        return out

    def check_policy(self) -> str:
        pairs = self._image_policy_bindings()
        if not pairs:
            return "skipped: no image policy rendered for this env"
        policy, binding = pairs[0]
        actions = binding["spec"].get("validationActions") or []
        runtime = next(r for r in golden_runtimes(self.rendered) if not is_gpu(r))
        image = None
        for spec in pod_specs(runtime):
            for container in spec.get("containers", []):
                image = image or container.get("image")
        repo = (
            (image or "busybox").split("@")[0].rsplit(":", 1)[0]
            if ":" in (image or "").split("/")[-1]
            else (image or "busybox")
        )
        job = SmokeJob("latest-image", runtime, num_nodes=1, labels=self.job_labels).manifest(SMOKE_NS)
        job["spec"]["trainer"]["image"] = f"{repo}:latest"
        result = self.kube.kubectl("create", "-f", "-", input_text=yaml.safe_dump(job), check=False)
        name = policy["metadata"]["name"]
        messages = [v["message"] for v in policy["spec"].get("validations", []) if v.get("message")]
        messages += [
            lit
            for v in policy["spec"].get("validations", [])
            for lit in message_literals(v.get("messageExpression", ""))[:1]
        ]
        said = result.stderr
        if "Deny" in actions:
            if result.returncode == 0:
                self.kube.kubectl("delete", "trainjob", "latest-image", "-n", SMOKE_NS, "--wait=false", check=False)
                raise SuiteFailure(f"a TrainJob with image {repo}:latest was admitted, but policy {name} denies it")
            if name not in said or (messages and not any(m in said for m in messages)):
                raise SuiteFailure(f"the rejection does not carry policy {name}'s message: {_said(said)}")
            return f"rejected by {name}: {_said(said)[:160]}"
        if "Warn" in actions:
            self.kube.kubectl("delete", "trainjob", "latest-image", "-n", SMOKE_NS, "--wait=false", check=False)
            if result.returncode != 0:
                raise SuiteFailure(f"policy {name} only warns here, but the TrainJob was rejected: {_said(said)}")
            if name not in said or "Warning" not in said:
                raise SuiteFailure(
                    f"no warning from policy {name} for image {repo}:latest (kubectl said: "
                    f"{_said(said) or 'nothing'})"
                )
            return f"warned by {name} (env {self.env} warns, does not deny): {_said(said)[:160]}"
        return f"skipped: binding {binding['metadata']['name']} only audits ({', '.join(actions)})"

    def failing_runtime(self, simulated: bool = True) -> dict[str, Any]:
        """A namespaced copy of the CPU torch runtime with no Job retries; `simulated`: KWOK fails its pods."""
        candidates = [r for r in golden_runtimes(self.rendered) if "torch" in ml_policies(r) and not is_gpu(r)]
        # the plain one (fewest replicated jobs), not e.g. torch with the data cache's initializer
        base = min(candidates, key=lambda r: len(pod_specs(r))) if candidates else golden_runtimes(self.rendered)[0]
        spec = copy.deepcopy(base["spec"])
        for rj in spec["template"]["spec"]["replicatedJobs"]:
            job_spec = rj.setdefault("template", {}).setdefault("spec", {})
            job_spec["backoffLimit"] = 0
            if simulated:
                meta = job_spec.setdefault("template", {}).setdefault("metadata", {})
                meta.setdefault("labels", {})[FAIL_LABEL] = "true"
        labels = {FRAMEWORK_LABEL: (base["metadata"].get("labels") or {}).get(FRAMEWORK_LABEL, "torch")}
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "TrainingRuntime",
            "metadata": {"name": "fail-fast", "namespace": SMOKE_NS, "labels": labels},
            "spec": spec,
        }

    def check_failure(self) -> str:
        if not self.provider.can_fail_pods:
            return f"skipped: {self.provider.name} cannot make pods fail on purpose"
        real = bool(getattr(self.provider, "real", False))
        runtime = self.failing_runtime(simulated=not real)
        self.kube.kubectl("apply", "-f", "-", input_text=yaml.safe_dump(runtime))
        job = SmokeJob("fails", runtime, num_nodes=1, expect="Failed", labels=self.job_labels)
        if real:  # a real container that exits 3, on the real node
            job.command = ["python", "-c", "import sys; print('failing on purpose'); sys.exit(3)"]
            self.place(job)
        self.kube.kubectl("create", "-f", "-", input_text=yaml.safe_dump(job.manifest(SMOKE_NS)))
        self.failed_job = job
        items = self.wait_trainjobs({"fails": "Failed"}, timeout=max(90, self.provider.job_timeout))
        _, message = terminal_state(items["fails"])
        how = "a real container exited 3" if real else "KWOK failed its pod"
        return f"TrainJob fails ended Failed ({how}): {message[:160]}"

    def uninstall(self) -> str:
        before = {t["metadata"]["name"] for t in self.read("trainjobs", SMOKE_NS)}
        result = subprocess.run(
            self.helm_cmd("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "120s"),
            capture_output=True,
            text=True,
            env=helm.env(self.lock),
            timeout=180,
        )
        (self.run_dir / "helm-uninstall.log").write_text(result.stdout + result.stderr)
        if result.returncode != 0:
            raise SuiteFailure(f"helm uninstall failed: {helm.first_error_line(result.stderr or result.stdout)}")
        self.installed = False
        self.provider.after_uninstall(self)
        crds = [o["metadata"]["name"] for o in self.rendered if o.get("kind") == "CustomResourceDefinition"]
        have = {c["metadata"]["name"] for c in self.read("customresourcedefinitions")}
        gone = [c for c in crds if c not in have and c.endswith(GROUP)]
        if gone:
            raise SuiteFailure(f"helm uninstall deleted CRDs: {', '.join(gone)}")
        after = {t["metadata"]["name"] for t in self.read("trainjobs", SMOKE_NS)}
        if before - after:
            raise SuiteFailure(f"TrainJobs gone after helm uninstall: {', '.join(sorted(before - after))}")
        left = [d["metadata"]["name"] for d in self.read("deployments", NAMESPACE)]
        if left:
            raise SuiteFailure(f"Deployments left after helm uninstall: {', '.join(left)}")
        kept = sum(1 for c in crds if c in have)
        return f"{kept} CRDs and {len(after)} TrainJobs kept; release objects removed"


def terminal_state(trainjob: dict[str, Any] | None) -> tuple[str, str]:
    """('Complete'|'Failed'|'', message) from a TrainJob's conditions."""
    if not trainjob:
        return "", ""
    for cond in (trainjob.get("status") or {}).get("conditions") or []:
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
            return cond["type"], f"{cond.get('reason', '')}: {cond.get('message', '')}".strip(": ")
    return "", ""


def _said(text: str) -> str:
    """The last line of a rejection or failure (kubectl's error), "" when there is none."""
    return output_line(text, markers=(), empty="")


def summary_rows(steps: list[Step]) -> list[tuple[str, str, str, str]]:
    return [(s.name, s.result, f"{s.seconds:.1f}", s.detail[:120]) for s in steps]
