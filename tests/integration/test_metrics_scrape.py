"""The pinned Trainer and JobSet binaries' real /metrics, scraped on 127.0.0.1 from processes
running against the local kube-apiserver: what guards each endpoint (JobSet: token + RBAC,
Trainer v2.3.0: nothing), and which of the names the shipped rules and dashboard use they serve.
The full-platform scrape after the smoke TrainJobs belongs to the e2e suite
(`trainstack.monitoring.scrape` and `verify_scrape`)."""

from __future__ import annotations

import os
import subprocess
import tarfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from conftest import ROOT
from support.clusters import scratch
from trainstack import monitoring, tools, yamlio
from trainstack.cluster.local import FAIL_LABEL, free_port, stop_pids

# Vector metrics appear after their first event. Here no webhook configuration points at the
# processes, so webhook latency is never observed (the smoke suite's TrainJobs call the webhooks).
AFTER_WEBHOOK_CALLS = {"controller_runtime_webhook_latency_seconds_bucket"}


@pytest.fixture
def local_cluster(local_cluster):
    """The shared bare cluster (tests/support/clusters.py): no chart, so no controller of the chart holds the
    leader lease the processes started here take; what the test creates there is deleted afterwards."""
    with scratch(local_cluster) as cluster:
        yield cluster


def jobset_of(name: str, fail: bool, image: str) -> dict:
    labels = {FAIL_LABEL: "true"} if fail else {}
    pod = {"metadata": {"labels": labels}, "spec": {"restartPolicy": "Never", "containers": [
        {"name": "c", "image": image}]}}
    # What JobSet's mutating webhook would default (no webhook configuration points at the process).
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"successPolicy": {"operator": "All"},
                     "startupPolicy": {"startupPolicyOrder": "AnyOrder"},
                     "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
                     "replicatedJobs": [{"name": "node", "replicas": 1, "template": {"spec": {
                         "parallelism": 1, "completions": 1, "backoffLimit": 0, "completionMode": "Indexed",
                         "template": pod}}}]}}


def _self_signed(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(folder / "tls.key"),
                    "-out", str(folder / "tls.crt")], check=True, capture_output=True)


def _start(binary: Path, config: dict, workdir: Path, kubeconfig: Path, health: int) -> subprocess.Popen:
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {**os.environ, "TMPDIR": str(workdir / "tmp"), "KUBECONFIG": str(kubeconfig)}
    log = (workdir / "controller.log").open("w")
    process = subprocess.Popen([str(binary), f"--config={path}", f"--kubeconfig={kubeconfig}"], env=env,
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{health}/readyz", timeout=2) as response:
                if response.status == 200:
                    return process
        except (urllib.error.URLError, OSError):
            pass
        if process.poll() is not None:
            break
        time.sleep(1)
    stop_pids([process.pid])
    pytest.fail(f"{binary.name} did not become ready: {(workdir / 'controller.log').read_text()[-1500:]}")


def _status(url: str, token: str | None, want: int, timeout: float = 30) -> int | str:
    """The HTTP status of a scrape, asked again for up to TIMEOUT seconds until it is WANT: just after
    start the metrics server's authn/authz filter may not have its API clients yet (an error, 0)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            monitoring.scrape(url, token)
            got = 200
        except monitoring.ScrapeError as err:
            got = err.status or 0  # the HTTP status (the message's port may hold "401" too)
            last = err.message
        if got == want or time.monotonic() > deadline:
            return got if got == want else f"{got} ({last if got != 200 else 'ok'})"
        time.sleep(1)


def test_real_metrics_of_the_pinned_controllers(local_cluster, lock, tmp_path):
    need = {name: tools.find(name) for name in ("trainer-controller-manager", "jobset-controller")}
    if not all(need.values()):
        pytest.fail("the pinned controllers are not built: run 'make setup'")
    chart = ROOT / "charts" / "trainstack"
    crds = [yamlio.load(p.read_text()) for p in sorted((chart / "crds").glob("*.yaml"))]
    with tarfile.open(next((chart / "charts").glob("jobset-*.tgz"))) as archive:
        crds.append(yamlio.load(archive.extractfile("jobset/crds/jobset.x-k8s.io_jobsets.yaml").read()))
    local_cluster.apply(crds, server_side=True)
    local_cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                          *[f"crd/{c['metadata']['name']}" for c in crds])
    # The chart's reader role, bound to a scraper ServiceAccount (as templates/monitoring/ does).
    local_cluster.apply([
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kubeflow-system"}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "scraper", "namespace": "kubeflow-system"}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "nobody", "namespace": "kubeflow-system"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "metrics-reader"},
         "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "scraper"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "metrics-reader"},
         "subjects": [{"kind": "ServiceAccount", "name": "scraper", "namespace": "kubeflow-system"}]},
    ])
    token = local_cluster.kubectl("create", "token", "scraper", "-n", "kubeflow-system").stdout.strip()
    other = local_cluster.kubectl("create", "token", "nobody", "-n", "kubeflow-system").stdout.strip()

    processes = []
    try:
        ports = {name: {"metrics": free_port(), "health": free_port(), "webhook": free_port()} for name in need}
        election = {"leaderElect": True, "resourceNamespace": "kubeflow-system"}
        jobset_dir = tmp_path / "jobset"
        _self_signed(jobset_dir / "certs")
        jobset = ports["jobset-controller"]
        processes.append(_start(need["jobset-controller"], {
            "apiVersion": "config.jobset.x-k8s.io/v1alpha1", "kind": "Configuration",
            "webhook": {"port": jobset["webhook"], "host": "127.0.0.1", "certDir": str(jobset_dir / "certs")},
            "metrics": {"bindAddress": f"127.0.0.1:{jobset['metrics']}"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{jobset['health']}"},
            "leaderElection": election, "internalCertManagement": {"enable": False}},
            jobset_dir, local_cluster.kubeconfig, jobset["health"]))
        trainer_dir = tmp_path / "trainer"
        _self_signed(trainer_dir / "tmp" / "k8s-webhook-server" / "serving-certs")
        trainer = ports["trainer-controller-manager"]
        processes.append(_start(need["trainer-controller-manager"], {
            "apiVersion": "config.trainer.kubeflow.org/v1alpha1", "kind": "Configuration",
            "webhook": {"port": trainer["webhook"], "host": "127.0.0.1"},
            "metrics": {"bindAddress": f"127.0.0.1:{trainer['metrics']}", "secureServing": True},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{trainer['health']}"},
            "leaderElection": {**election, "resourceName": "trainer.kubeflow.org", "leaseDuration": "15s",
                               "renewDeadline": "10s", "retryPeriod": "2s"},
            "certManagement": {"enable": False}},
            trainer_dir, local_cluster.kubeconfig, trainer["health"]))

        jobset_url = f"https://127.0.0.1:{jobset['metrics']}/metrics"
        trainer_url = f"https://127.0.0.1:{trainer['metrics']}/metrics"
        # JobSet: authentication and authorization on /metrics; Trainer v2.3.0: none.
        assert _status(jobset_url, None, 401) == 401
        assert _status(jobset_url, other, 403) == 403
        assert _status(trainer_url, None, 200) == 200

        # One JobSet that completes and one that fails (KWOK decides the pods), so the JobSet
        # controller reconciles and counts both outcomes.
        # And a runtime for the Trainer controller to reconcile. (KWOK runs no container: any image.)
        image = lock.image("torch").reference()
        runtime = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
                   "metadata": {"name": "torch-distributed", "labels": {"trainer.kubeflow.org/framework": "torch"}},
                   "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {"replicatedJobs": [
                       {"name": "node", "template": {"spec": {"template": {"spec": {"containers": [
                           {"name": "node", "image": image}]}}}}}]}}}}
        local_cluster.apply([jobset_of("ok", False, image), jobset_of("broken", True, image), runtime])
        groups = monitoring.shipped_rule_groups()
        deadline = time.monotonic() + 60
        while True:
            texts = {"jobset": monitoring.scrape(jobset_url, token), "trainer": monitoring.scrape(trainer_url)}
            report = monitoring.verify_scrape(texts, groups)
            done = all(set(r["missing"]) <= AFTER_WEBHOOK_CALLS for r in report.values())
            if done or time.monotonic() > deadline:
                break
            time.sleep(3)
        state = local_cluster.kubectl("get", "jobsets,jobs,pods", "-n", "default", "-o", "wide", check=False).stdout
        log = (tmp_path / "jobset" / "controller.log").read_text()[-1500:]
        for controller, result in report.items():
            assert set(result["missing"]) <= AFTER_WEBHOOK_CALLS, (controller, result["missing"], state, log)
            assert {"workqueue_depth", "leader_election_master_status", "process_resident_memory_bytes",
                    "controller_runtime_reconcile_total"} <= set(result["present"]), controller
        print({c: r["missing"] for c, r in report.items()})
    finally:
        stop_pids([p.pid for p in processes])
