"""The e2e failure paths: failing pods, a controller that cannot start, a port already taken."""

from __future__ import annotations

import shutil
import socket
import time

import pytest
import yaml

from conftest import run_cli
from trainstack import paths
from trainstack.cluster.local import pid_alive
from trainstack.e2e import artifacts
from trainstack.e2e import base as basemod
from trainstack.e2e import smokejobs as smokemod
from trainstack.e2e import suite as suitemod
from trainstack.e2e.providers.local import LocalProvider

from .conftest import ONE_REAL_NODE, need_binaries

BESIDE_REAL_NODES = True  # KWOK clusters and local processes only (tests/e2e/conftest.py)

pytestmark = pytest.mark.e2e


def test_failing_pods_end_the_trainjob_failed_and_the_suite_reports_it(platform, tmp_path):
    # the session's shared platform (tests/clusters.py); the suite's smoke namespace is this test's alone
    suite = platform
    suite.kube.kubectl("create", "namespace", basemod.SMOKE_NS, check=False)
    runtime = suite.failing_runtime()
    suite.kube.kubectl("apply", "-f", "-", input_text=yaml.safe_dump(runtime))
    job = smokemod.SmokeJob("meant-to-complete", runtime, num_nodes=2)
    suite.kube.kubectl("create", "-f", "-", input_text=yaml.safe_dump(job.manifest(basemod.SMOKE_NS)))

    start = time.monotonic()
    with pytest.raises(basemod.SuiteFailure) as failure:
        suite.wait_trainjobs({"meant-to-complete": "Complete"}, timeout=120)
    assert time.monotonic() - start < 120
    assert "TrainJob trainstack-e2e/meant-to-complete ended Failed, expected Complete" in failure.value.message

    trainjob = suite.kube.kubectl_json("get", "trainjob", "meant-to-complete", "-n", basemod.SMOKE_NS)
    assert basemod.terminal_state(trainjob)[0] == "Failed"
    jobset = suite.kube.kubectl_json("get", "jobset", "meant-to-complete", "-n", basemod.SMOKE_NS)
    assert any(c["type"] == "Failed" and c["status"] == "True" for c in jobset["status"]["conditions"])
    pods = suite.kube.kubectl_json(
        "get", "pods", "-n", basemod.SMOKE_NS, "-l", "jobset.sigs.k8s.io/jobset-name=meant-to-complete"
    )["items"]
    assert pods and any(p["status"]["phase"] == "Failed" for p in pods)

    # what a failed run keeps: every component's log and the YAML of the objects
    folder = artifacts.collect("test", suite.kube, suite.provider.logs(), suite.run_dir, "summary", root=tmp_path)
    logs = {p.name for p in (folder / "logs").iterdir()}
    assert {"kube-apiserver.log", "etcd.log", "kwok-controller.log", "helm-install.log"} <= logs
    assert any(name.startswith("kubeflow-trainer") for name in logs), logs
    assert "meant-to-complete" in (folder / "objects" / "trainjobs.trainer.kubeflow.org.yaml").read_text()
    assert "<redacted>" in (folder / "objects" / "secrets.yaml").read_text()


def test_a_controller_that_cannot_start_stops_the_suite_with_its_log():
    # a cluster of its own: the suite must fail at helm install and tear everything down
    need_binaries("trainer-controller-manager", "jobset-controller", "kube-apiserver", "kwokctl")
    run_dir = paths.cache_dir() / "e2e" / "pytest-broken-controller"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    provider = LocalProvider(run_dir, real_nodes=ONE_REAL_NODE, controller_args={"trainer-controller-manager": ["--no-such-flag"]})
    suite = suitemod.Suite(provider, "dev", run_dir)
    start = time.monotonic()
    try:
        with pytest.raises(basemod.SuiteFailure) as failure:
            suite.run()
        pids = provider.pids()
    finally:
        provider.down(keep=False)
        shutil.rmtree(run_dir, ignore_errors=True)
    assert time.monotonic() - start < 150, "a broken controller must not make the suite hang"
    message = failure.value.message
    assert message.startswith("helm install: controller kubeflow-trainer"), message
    assert "exited with code" in message and "no-such-flag" in message, message
    results = {s.name: s.result for s in suite.steps}
    assert results["helm install"] == "FAIL" and results["smoke TrainJobs Complete"] == "not run"
    assert pids and not [p for p in pids.values() if pid_alive(p)], "teardown left processes running"


@pytest.mark.slow
def test_a_port_already_taken_is_one_clear_error_and_nothing_starts():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli("e2e", "--provider", "local", "--port-base", str(port), timeout=300)
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and f"port 127.0.0.1:{port} (etcd port) is already in use" in last, last
    assert "Traceback" not in result.stderr
