"""The e2e suite's failure path on the integration tier's shared platform (the chart on KWOK nodes,
the controllers running): a TrainJob whose pods fail ends Failed, the suite says which and why, and a
failed run keeps every component's log and the objects' YAML. The suite's smoke namespace is this
test's alone on its worker's cluster, and goes with it."""

from __future__ import annotations

import time

import pytest
import yaml

from trainstack.e2e import artifacts
from trainstack.e2e import base as basemod
from trainstack.e2e import smokejobs as smokemod


@pytest.fixture
def smoke_namespace(platform):
    platform.kube.kubectl("create", "namespace", basemod.SMOKE_NS, check=False)
    try:
        yield basemod.SMOKE_NS
    finally:
        platform.kube.kubectl("delete", "namespace", basemod.SMOKE_NS, "--wait=false", check=False)


def test_failing_pods_end_the_trainjob_failed_and_the_suite_reports_it(platform, smoke_namespace, tmp_path):
    suite = platform
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
