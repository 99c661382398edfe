"""What `trainstack e2e` checks, whatever brought the cluster (local, kind or existing).

The suite installs the umbrella chart the way a user does (pinned helm, the environment's
values), waits for CRDs, controllers and webhooks, checks that the golden runtimes and policies
the chart rendered are in the cluster, submits one smoke TrainJob per golden runtime and waits for
each to be Complete, checks what users rely on (the JobSet and Jobs, the injected PET_/JAX_/DMLC_/
OMPI_ environment, pod placement), that the image policy acts on a `:latest` image, that a failing
pod ends its TrainJob Failed, and that CRDs and TrainJobs survive `helm uninstall`.
Each step is timed and recorded; the first failure stops the run.
The Suite (here) runs the steps and records them; the steps live beside it: platformchecks.py
(what any install brought up), workloadchecks.py (smoke TrainJobs and what users rely on),
realnode.py (a real node: SDK training, checkpoints, a killed worker), frameworks.py (JAX and XGBoost
training through the SDK, TrainJobs naming only a runtime); smokejobs.py holds the
smoke TrainJobs and the facts about runtimes, base.py the shared names and records.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import helm, kubeapi, paths, proc, progress, publish
from .. import lock as lockmod
from ..errors import UserError
from ..jsontypes import dig
from .base import (
    GROUP,
    NAMESPACE,
    PART_OF,
    RELEASE,
    SMOKE_NS,
    VERSION,
    Outcome,
    Step,
    StepFn,
    SuiteFailure,
    server_version,
    terminal_state,
    unready_pods,
)
from .frameworks import FrameworkSteps
from .platformchecks import PlatformChecks
from .smokejobs import (
    SmokeJob,
    golden_runtimes,
    render,
    required_labels,
    value_args,
)
from .workloadchecks import WorkloadChecks

# What a smoke job that really runs asks per node (it prints its host name; a limit for its start-up)
REAL_SMOKE_RESOURCES = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"cpu": "500m", "memory": "1536Mi"}}


# The first install's Kueue objects are a post-install hook (charts/trainstack/templates/teams/kueue-*.yaml), run
# once the release's Deployments are Ready; on a loaded cluster Kueue's Ready pod is not always reachable through
# its webhook Service yet (its endpoints lag), and the hook fails closed (docs/teams.md, "The first install").
KUEUE_HOOK = "templates/teams/kueue-"  # its files, one per kind
UNREACHABLE_WEBHOOK = 'failed calling webhook "'


def kueue_hook_unreachable(output: str, hook: bool = True) -> bool:
    """Whether helm's OUTPUT says a Kueue webhook could not be called (in the first install's queue hook: HOOK)."""
    lines = output.splitlines()
    return any(UNREACHABLE_WEBHOOK in line and "kueue-webhook-service" in line and (not hook or KUEUE_HOOK in line)
               for line in lines)


class Suite(PlatformChecks, WorkloadChecks, FrameworkSteps):
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
        self.workload_images: tuple[str, ...] = ("torch-cpu", "jax-cpu", "xgboost-cpu", "mlx-cpu")
        self.chart_reference = ""  # the published chart `helm install` installed, where it came from a registry
        self.install_args: list[str] = []  # the chart and values `helm install` was given

    # -- bookkeeping ------------------------------------------------------------------------
    def step(self, name: str, fn: StepFn) -> None:
        step = Step(name)
        self.steps.append(step)
        start = time.monotonic()
        try:
            with progress.step(name):
                out = fn()
                if isinstance(out, Outcome):
                    step.detail, step.data = out.detail, out.data
                else:
                    step.detail = out or ""
            step.result = "skip" if step.detail.startswith("skipped") else "pass"
        except UserError as err:
            step.result, step.detail = "FAIL", err.message
            raise
        except proc.TimeoutExpired as err:
            step.result, step.detail = "FAIL", f"timed out: {err.cmd[:3] if isinstance(err.cmd, list) else err.cmd}"
            raise SuiteFailure(f"{name}: {step.detail}") from None
        finally:
            step.seconds = time.monotonic() - start

    def platform_checks(self) -> list[tuple[str, StepFn]]:
        """What any install must have brought up, however it was installed (helm, Argo CD, nothing)."""
        return [
            ("CRDs established", self.crds_established),
            ("controllers and webhooks ready", self.controllers_ready),
            ("golden runtimes installed", self.runtimes_installed),
            ("policies installed", self.policies_installed),
        ]

    def cluster_steps(self, note: str = "") -> list[tuple[str, StepFn]]:
        """The first two steps of every plan: the chart rendered, the provider's cluster up."""
        return [("render the chart", self.render_chart), (f"cluster ({self.provider.name}{note})", self.cluster_up)]

    def plan(self) -> list[tuple[str, StepFn]]:
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
            *([("helm test", self.helm_test)] if getattr(self.provider, "real", False) else []),
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

    def run(self, planned: list[tuple[str, StepFn]] | None = None, hint: str = "") -> None:
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

    def cluster_up(self) -> Outcome:
        self.kube = self.provider.up(self)
        version = server_version(self.kube)
        nodes = self.kube.kubectl_json("get", "nodes").get("items", [])
        # the kubelets that really run pods (KWOK's fake nodes report a version they were told)
        kubelets = sorted({n.get("status", {}).get("nodeInfo", {}).get("kubeletVersion", "") for n in nodes
                           if dig(n["metadata"], "annotations", "kwok.x-k8s.io/node") != "fake"})
        return Outcome(self.provider.describe(), {"serverVersion": version, "kubeletVersions": kubelets,
                                                  **self.provider.cluster_data()})

    def release(self, binary: str = "helm") -> helm.Release:
        """The platform's release on the provider's cluster, driven by BINARY (helm, or helm3)."""
        return helm.Release(self.provider.kubeconfig, getattr(self.provider, "context", None), RELEASE, NAMESPACE,
                            self.lock, binary)

    def chart_source(self) -> list[str]:
        """What `helm install` installs: where the cluster has a registry (the local provider's real nodes),
        the packaged chart pushed there with `trainstack chart publish` and installed from it (what users
        install); else the working tree's chart folder."""
        port = getattr(getattr(self.provider, "cluster", None), "registry_port", 0) if self.provider.name == "local" else 0
        if not port:
            return [str(paths.chart_dir())]
        # the registry's storage outlives the cluster (its images are a cache) while this checkout's chart
        # changes under one version: the working tree's chart replaces what an earlier run pushed
        published = publish.publish(f"oci://127.0.0.1:{port}/charts", plain_http=True, lock=self.lock,
                                    out_dir=self.run_dir / "chart", replace=True)
        self.chart_reference = f"{published.reference} {published.version} ({published.digest[:19]}...)"
        return [published.reference, "--version", published.version, "--plain-http"]

    def install(self) -> Outcome:
        source = self.chart_source()
        self.install_args = [*source, *value_args(self.env, self.data_cache, self.extra_values)]
        release = self.release()
        cmd = release.install(*self.install_args, "--create-namespace", "--wait", "--timeout", "180s")
        # the chart puts the cache initializer's ServiceAccount, or the tracking accounts' Roles, there
        for namespace in dict.fromkeys(([SMOKE_NS] if self.data_cache else [])
                                       + list(getattr(self.provider, "tracking_namespaces", []))):
            self.kube.kubectl("create", "namespace", namespace, check=False)
        log_path = self.run_dir / "helm-install.log"
        with log_path.open("w") as sink:
            sink.write("$ " + " ".join(cmd) + "\n")
            sink.flush()
            process = release.start(cmd, sink)
            try:
                notes = self.provider.while_installing(self, process) or ""
                rc = process.wait(timeout=240)
            except BaseException:
                process.kill()
                process.wait()
                raise
        if rc != 0 and kueue_hook_unreachable(log_path.read_text()):
            rc, finished = self.finish_kueue_install(log_path)
            notes = "; ".join(n for n in (notes, finished) if n)
        self.installed = rc == 0 or self.installed
        if rc != 0:
            raise SuiteFailure(
                f"helm install failed: {helm.first_error_line(log_path.read_text())}{self.platform_pods()}",
                f"log: {log_path}"
            )
        self.installed = True
        cache = " --set dataCache.enabled=true" if self.data_cache else ""
        line = ["install", RELEASE, *self.install_args, "-n", NAMESPACE, "--create-namespace"]
        shown = " ".join(line[:7 + len(source)]) + cache
        return Outcome(shown + (f"; published {self.chart_reference}" if self.chart_reference else "")
                       + (f"; {notes}" if notes else ""), {"chart": source[0]})

    def finish_kueue_install(self, log_path: Path, attempts: int = 4, pause: float = 10.0) -> tuple[int, str]:
        """What docs/teams.md tells a user whose first install met Kueue's webhook before it answered: the release
        is there, and `helm upgrade` with the same chart and values creates the queues as release objects
        (adopting those the hook made). Up to ATTEMPTS upgrades, PAUSE seconds apart, each appended to LOG_PATH;
        (helm's exit status, what was done)."""
        rc = 1
        for attempt in range(1, attempts + 1):
            time.sleep(pause)
            release = self.release()
            cmd = release.upgrade(*self.install_args, "--wait", "--timeout", "180s", "--force-conflicts")
            result = release.run(cmd, check=False, timeout=240)
            with log_path.open("a") as sink:
                sink.write(f"$ {' '.join(cmd)}\n{result.stdout}{result.stderr}")
            rc = result.returncode
            if rc == 0:
                self.log(f"Kueue's webhook answered: `helm upgrade` created the teams' queues (attempt {attempt})")
                return 0, (f"Kueue's webhook did not answer the first install's queue hook; `helm upgrade` "
                           f"created the queues (attempt {attempt})")
            if not kueue_hook_unreachable(result.stderr + result.stdout, hook=False):
                break
        return rc, ""

    def platform_pods(self, namespace: str = NAMESPACE) -> str:
        """What a failed install or a sync that waits on the platform's Deployments waits for, appended to its
        failure: the pods of NAMESPACE (the platform's) that are not Ready and why, the nodes under pressure and
        its latest warning events. A cluster that does not answer adds one clause, never a second failure."""
        try:
            pods = unready_pods(self.kube.kubectl_json("get", "pods", "-n", namespace).get("items") or [])
            nodes = self.kube.kubectl_json("get", "nodes").get("items") or []
            events = self.kube.kubectl_json("get", "events", "-n", namespace, "--field-selector", "type=Warning",
                                            "--sort-by=.lastTimestamp").get("items") or []
        except (UserError, ValueError) as err:
            return f"; the platform's pods could not be read: {getattr(err, 'message', err)}"
        pressure = [f"{node['metadata']['name']} {c['type']}" for node in nodes
                    for c in dig(node, "status", "conditions") or []
                    if c.get("type", "").endswith("Pressure") and c.get("status") == "True"]
        warnings: list[str] = []
        for event in events:
            line = (f"{dig(event, 'involvedObject', 'name')} {event.get('reason')}: "
                    f"{(event.get('message') or '')[:160]}")
            if line not in warnings:
                warnings.append(line)
        return (f"; pods of {namespace} not Ready: {' | '.join(pods) or 'none'}"
                f"; node pressure: {', '.join(pressure) or 'none'}"
                f"; latest warnings: {' | '.join(warnings[-4:]) or 'none'}")

    def place(self, job: SmokeJob) -> SmokeJob:
        """Ask the provider where the job's pods go (a real node or KWOK) and whether it really runs."""
        placement = getattr(self.provider, "placement", None)
        if placement is not None:
            job.node_selector, job.tolerations = placement(job)
        job.real = bool(getattr(self.provider, "is_real", lambda j: getattr(self.provider, "real_pods", False))(job))
        if job.real:
            # a smoke job prints a line: at the runtime's CPU request, the real ones (torch, JAX, XGBoost, MLX: eight
            # pods at half a CPU) would not fit two 2-core nodes beside the controllers, and would queue
            job.resources = dict(REAL_SMOKE_RESOURCES)
        return job

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

    def uninstall(self) -> str:
        before = {t["metadata"]["name"] for t in self.read("trainjobs", SMOKE_NS)}
        release = self.release()
        result = release.run(release.uninstall("--wait", "--timeout", "120s"), check=False, timeout=180)
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
