"""The admission probe the upgrade, fault and migration checks use (`clusterstate.rejection`): a TrainJob
created as a server-side dry run through the client connection, on the shared platform (the chart's
webhooks and policies). Admitted is '', refused is the API server's reason, and nothing is stored."""

from __future__ import annotations

import time
from typing import Any

from trainstack import api
from trainstack.e2e.clusterstate import WebhookProbe, rejection


def trainjob(namespace: str, runtime: str) -> dict[str, Any]:
    trainer: dict[str, Any] = {"numNodes": 1, "command": ["python", "-c", "print(1)"]}
    return {"apiVersion": api.TRAINER_API, "kind": "TrainJob", "metadata": {"name": "probe", "namespace": namespace},
            "spec": {"runtimeRef": {"name": runtime, "kind": "ClusterTrainingRuntime", "apiGroup": api.TRAINER_GROUP},
                     "trainer": trainer}}


def test_admitted_is_empty_refused_is_the_servers_reason_and_nothing_is_stored(platform, namespace):
    kube = platform.kube
    assert rejection(kube, trainjob(namespace, "torch-distributed")) == ""
    missing = rejection(kube, trainjob(namespace, "no-such-runtime"))
    assert missing.startswith(("(4", "(5")) and "no-such-runtime" in missing, missing
    assert kube.kubectl_json("get", "trainjobs", "-n", namespace)["items"] == []


def test_the_probe_samples_until_stopped(platform, namespace):
    with WebhookProbe(platform.kube, trainjob(namespace, "torch-distributed"), interval=0.1) as probe:
        time.sleep(1.5)
    assert len(probe.samples) >= 5 and probe.rejected == 0 and probe.gap == 0, (probe.samples, probe.last_error)
    assert platform.kube.kubectl_json("get", "trainjobs", "-n", namespace)["items"] == []
