"""The suite's checks of the platform itself, however it was installed (helm, Argo CD, nothing):
CRDs established, controllers and webhooks answering, the golden runtimes and policies the chart
rendered in the cluster, the data cache's LeaderWorkerSet, and the smoke TrainJobs admitted."""

from __future__ import annotations

import time

import yaml

from .. import api, helm, kubeapi
from ..jsontypes import dig
from .base import (
    FRAMEWORK_LABEL,
    LWS_NAME_LABEL,
    NAMESPACE,
    PART_OF,
    RELEASE,
    SMOKE_NS,
    Outcome,
    SuiteFailure,
    said_line,
)
from .smokejobs import SmokeJob, golden_runtimes, job_name, pod_specs
from .suitestate import SuiteState


class PlatformChecks(SuiteState):
    """Steps that check what any install brought up (mixed into Suite: uses its kube, rendered,
    job_labels, api and read)."""

    def crds_established(self) -> str:
        names = [o["metadata"]["name"] for o in self.rendered if o.get("kind") == "CustomResourceDefinition"]
        self.kube.kubectl(
            "wait", "--for=condition=Established", "--timeout=60s", *[f"crd/{n}" for n in names], timeout=90
        )
        return f"{len(names)} CRDs"

    def helm_test(self, clients: tuple[str, ...] = ("helm",)) -> Outcome:
        """`helm test` of the installed release: the chart's own check of a working platform, in a pod on the
        cluster (templates/platform-test/): the golden runtimes served, a TrainJob admitted by the webhooks
        and policies, a `:latest` one answered by the image-tag policy. With stock helm v4 on the release it
        installed (what `make e2e` runs); with CLIENTS ("helm", "helm3") then again with helm v3 after a
        `helm3 upgrade` from the same chart (the published one where it was installed from the registry), as
        tests/e2e/test_real_platform.py runs it. Its checks come back as fields, per helm."""
        data: dict[str, dict] = {}
        # with the data cache the provider points LWS's webhooks at its host process after the install, which
        # an upgrade would undo: helm v4 only there
        binaries = ("helm",) if getattr(self, "data_cache", False) else clients
        for binary in binaries:
            release = self.release(binary)
            if binary == "helm3":
                upgrade = release.upgrade(*self.install_args, "--wait", "--timeout", "180s")
                result = release.run(upgrade, check=False, timeout=240)
                if result.returncode != 0:
                    raise SuiteFailure(f"helm3 upgrade: {helm.first_error_line(result.stderr or result.stdout)}")
            result = release.run(release.test("--logs", "--timeout", "180s"), check=False, timeout=240)
            log = self.run_dir / f"{binary}-test.log"
            log.write_text(result.stdout + result.stderr)
            lines = [line.strip() for line in result.stdout.splitlines()]
            # helm v4 prints the pod's log once per test hook object (seven here): each check once
            checks = list(dict.fromkeys(line for line in lines if line.startswith(("ok ", "FAIL "))))
            phase = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("Phase:")), "")
            data[binary] = {"phase": phase, "checks": checks, "failed": [c for c in checks if c.startswith("FAIL")]}
            if result.returncode != 0 or phase != "Succeeded" or data[binary]["failed"] or not checks:
                said = "; ".join(data[binary]["failed"]) or helm.first_error_line(result.stderr or result.stdout)
                raise SuiteFailure(f"{binary} test: {said}", f"log: {log}")
        checks = data["helm"]["checks"]
        also = ", and with helm v3 after a helm3 upgrade" if "helm3" in data else ""
        return Outcome(f"{len(checks)} checks passed in pod {RELEASE}-platform-test with helm v4{also}: "
                       + "; ".join(c.removeprefix("ok").strip() for c in checks), data)

    def controllers_ready(self) -> Outcome:
        self.kube.kubectl(
            "wait", "--for=condition=Available", "--timeout=90s", "deployment", "--all", "-n", NAMESPACE, timeout=120
        )
        # A server-side dry run passes the TrainJob through the mutating and validating webhooks.
        probe = SmokeJob("webhook-probe", golden_runtimes(self.rendered)[0], labels=self.job_labels).manifest(NAMESPACE)
        deadline = time.monotonic() + 30
        while True:
            result = self.kube.kubectl(
                "create", "--dry-run=server", "-f", "-", input_text=yaml.safe_dump(probe), check=False
            )
            if result.returncode == 0:
                break
            if time.monotonic() > deadline:
                raise SuiteFailure(f"webhooks do not answer a dry-run TrainJob: {said_line(result.stderr)}")
            time.sleep(0.5)
        deploys = self.read("deployments", NAMESPACE)
        # where each controller's pods run: a node's name, or none for controllers run as host processes
        pods = self.read("pods", NAMESPACE)
        running = {d["metadata"]["name"]: sorted(p["spec"].get("nodeName") or "" for p in pods
                                                 if p["metadata"]["name"].startswith(d["metadata"]["name"] + "-")
                                                 and dig(p, "status", "phase") == "Running")
                   for d in deploys}
        return Outcome(f"{len(deploys)} Deployments Available; TrainJob dry run admitted by the webhooks",
                       {"deployments": sorted(running), "pods_on_nodes": running, "webhook_dry_run": "admitted"})

    def runtimes_installed(self) -> str:
        wanted = {r["metadata"]["name"]: r for r in golden_runtimes(self.rendered)}
        selector = f"{PART_OF[0]}={PART_OF[1]}"
        items = self.read("clustertrainingruntimes", label_selector=selector)
        have = {r["metadata"]["name"]: r for r in items}
        missing = sorted(set(wanted) - set(have))
        if missing:
            raise SuiteFailure(f"golden runtimes rendered by the chart are not in the cluster: {', '.join(missing)}")
        unlabelled = sorted(n for n, r in have.items() if not dig(r["metadata"], "labels", FRAMEWORK_LABEL))
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
            "apiVersion": api.LWS_API,
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
            raise SuiteFailure(f"LeaderWorkerSet {name} not admitted: {said_line(result.stderr)}")
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
                    f"TrainJob {job.name} (runtime {job.runtime_name}) is not admitted: {said_line(result.stderr)}"
                )
            names.append(job.name)
        return f"{len(names)} smoke TrainJobs admitted: {', '.join(names)} (read-only: pass --install to run them)"
