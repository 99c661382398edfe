"""The suite's checks of what users rely on, on smoke TrainJobs: each golden runtime's TrainJob
Complete, its JobSet and Jobs, the framework's injected env, pod placement, the image policy on
a `:latest` image, and a failing pod ending its TrainJob Failed."""

from __future__ import annotations

import copy
import json
from typing import Any

import yaml

from .. import kubeapi
from ..cluster.local import FAIL_LABEL
from ..jsontypes import dig
from .base import FRAMEWORK_LABEL, GROUP, SMOKE_NS, VERSION, Outcome, SuiteFailure, said_line, terminal_state
from .smokejobs import (
    SmokeJob,
    accelerators,
    expected_env,
    golden_runtimes,
    is_gpu,
    job_name,
    message_literals,
    ml_policies,
    node_selector,
    pod_specs,
)
from .suitestate import SuiteState


def stopped_at_success(jobset: dict[str, Any]) -> set[str]:
    """The replicated jobs of a Completed JobSet whose Jobs JobSet may have deleted: those its success policy
    does not wait for (an MPI runtime's node pods, running sshd, are stopped once the launcher succeeds)."""
    done = any(c.get("type") == "Completed" and c.get("status") == "True"
               for c in dig(jobset, "status", "conditions") or [])
    targets = set(dig(jobset["spec"], "successPolicy", "targetReplicatedJobs") or [])
    if not done or not targets:
        return set()
    return {rj["name"] for rj in jobset["spec"]["replicatedJobs"]} - targets


class WorkloadChecks(SuiteState):
    """Steps that run smoke TrainJobs and check what the controllers made of them (mixed into Suite:
    uses its kube, provider, rendered, jobs, job_labels, place, read and wait_trainjobs)."""

    def smoke_jobs(self) -> Outcome:
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
        pods = self.read("pods", SMOKE_NS, label_selector="jobset.sigs.k8s.io/jobset-name")
        where = {j.name: sorted({p["spec"].get("nodeName") or "-" for p in pods
                                 if p["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"] == j.name})
                 for j in self.jobs}
        kinds = ", ".join(f"{j.name} ({'real' if j.real else 'simulated'} on {'+'.join(where[j.name])})"
                          for j in self.jobs)
        rows = [{"job": j.name, "runtime": j.runtime_name, "real": bool(j.real), "nodes": where[j.name]}
                for j in self.jobs]
        return Outcome(f"{len(self.jobs)} TrainJobs Complete: {kinds}{note}", {"jobs": rows, "skipped": skipped})

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
                j for j in jobs if dig(j["metadata"], "labels", "jobset.sigs.k8s.io/jobset-name") == job.name
            ]
            wanted = {rj["name"] for rj in jobset["spec"]["replicatedJobs"]} - stopped_at_success(jobset)
            got = {dig(j["metadata"], "labels", "jobset.sigs.k8s.io/replicatedjob-name") for j in mine}
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
                p for p in pods if dig(p["metadata"], "labels", "jobset.sigs.k8s.io/jobset-name") == job.name
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

    def check_placement(self) -> Outcome:
        nodes = {n["metadata"]["name"]: n for n in self.read("nodes")}
        pods = self.read("pods", SMOKE_NS)
        counts = {"gpu": 0, "cpu": 0}
        for job in self.jobs:
            mine = [
                p for p in pods if dig(p["metadata"], "labels", "jobset.sigs.k8s.io/jobset-name") == job.name
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
        return Outcome(f"{counts['gpu']} GPU-runtime pods on GPU nodes, {counts['cpu']} CPU-runtime pods on CPU nodes",
                       {"gpu_pods_on_gpu_nodes": counts["gpu"], "cpu_pods_on_cpu_nodes": counts["cpu"]})

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
        # the trainer image's tag rule first (image-env also mentions ':latest', for images given in env vars)
        return sorted(out, key=lambda pair: not pair[0]["metadata"]["name"].endswith("image-tag"))

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
                raise SuiteFailure(f"the rejection does not carry policy {name}'s message: {said_line(said)}")
            return f"rejected by {name}: {said_line(said)[:160]}"
        if "Warn" in actions:
            self.kube.kubectl("delete", "trainjob", "latest-image", "-n", SMOKE_NS, "--wait=false", check=False)
            if result.returncode != 0:
                raise SuiteFailure(f"policy {name} only warns here, but the TrainJob was rejected: {said_line(said)}")
            if name not in said or "Warning" not in said:
                raise SuiteFailure(
                    f"no warning from policy {name} for image {repo}:latest (kubectl said: "
                    f"{said_line(said) or 'nothing'})"
                )
            return f"warned by {name} (env {self.env} warns, does not deny): {said_line(said)[:160]}"
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
        labels = {FRAMEWORK_LABEL: dig(base["metadata"], "labels", FRAMEWORK_LABEL, default="torch")}
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "TrainingRuntime",
            "metadata": {"name": "fail-fast", "namespace": SMOKE_NS, "labels": labels},
            "spec": spec,
        }

    def check_failure(self) -> Outcome | str:
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
        timeout = max(90, self.provider.job_timeout)
        selector = "jobset.sigs.k8s.io/jobset-name=fails"

        def exit_codes(pods: dict[str, dict[str, Any]]) -> list[int] | None:
            codes = sorted({c["state"]["terminated"]["exitCode"] for pod in pods.values()
                            for c in dig(pod, "status", "containerStatuses") or []
                            if dig(c, "state", "terminated")})
            return codes or None

        # watched while the pod exists: once the JobSet has failed, its Jobs (and their pods) may be gone
        api = kubeapi.for_kube(self.kube)
        exits = (kubeapi.wait_for(api, kubeapi.pods(api), exit_codes, timeout, namespace=SMOKE_NS,
                                  label_selector=selector) or []) if real else []
        items = self.wait_trainjobs({"fails": "Failed"}, timeout=timeout)
        state, message = terminal_state(items["fails"])
        how = "a real container exited 3" if real else "KWOK failed its pod"
        return Outcome(f"TrainJob fails ended Failed ({how}): {message[:160]}",
                       {"state": state, "message": message, "real": real, "exit_codes": exits})
