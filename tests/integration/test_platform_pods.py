"""The report a failed install or a stuck sync appends (Suite.platform_pods), read from a live API server:
a pod the scheduler cannot place is named with the scheduler's reason, and nothing else is."""

from __future__ import annotations

import json
import time


def test_an_unschedulable_pod_is_reported_with_the_schedulers_reason(platform, namespace):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "nowhere", "namespace": namespace},
           "spec": {"nodeSelector": {"trainstack.io/no-such-node": "true"},
                    "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}}
    platform.kube.kubectl("apply", "-f", "-", input_text=json.dumps(pod))
    deadline = time.monotonic() + 60
    report = platform.platform_pods(namespace)
    while "not scheduled" not in report and time.monotonic() < deadline:
        time.sleep(1)
        report = platform.platform_pods(namespace)
    pods = report.split("; pods of ", 1)[1].split("; node pressure: ", 1)[0]
    assert pods.startswith(f"{namespace} not Ready: nowhere: not scheduled: "), report
    assert "node affinity/selector" in pods, report
    assert "; node pressure: none;" in report, report
