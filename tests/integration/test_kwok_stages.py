"""The local cluster's KWOK stages (cluster/kwok.py): a Job pod runs for the time its run-time annotation
gives (what `trainstack bench scale --run-seconds` relies on to fill the pools), and one without it
completes as soon as it runs, as before."""

from __future__ import annotations

import time
from datetime import datetime

import yaml

from trainstack.cluster.kwok import RUN_TIME_ANNOTATION
from trainstack.jsontypes import dig

RUN_SECONDS = 8


def _job(name: str, annotations: dict[str, str]) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"backoffLimit": 0, "template": {
                "metadata": {"annotations": annotations},
                "spec": {"restartPolicy": "Never",
                         "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                         "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}}}


def _stamp(value: str) -> datetime:
    return datetime.fromisoformat(value)


def test_a_job_pod_runs_for_its_annotated_time_and_one_without_completes_at_once(platform, namespace):
    kube = platform.kube
    jobs = [_job("timed", {RUN_TIME_ANNOTATION: f"{RUN_SECONDS}s"}), _job("plain", {})]
    kube.kubectl("create", "-n", namespace, "-f", "-", input_text=yaml.safe_dump_all(jobs))
    deadline = time.monotonic() + 90
    done: dict[str, dict] = {}
    while len(done) < 2 and time.monotonic() < deadline:
        for job in kube.kubectl_json("get", "jobs", "-n", namespace)["items"]:
            if dig(job, "status", "completionTime"):
                done[job["metadata"]["name"]] = job["status"]
        time.sleep(1)
    assert set(done) == {"timed", "plain"}, done
    ran = {name: (_stamp(st["completionTime"]) - _stamp(st["startTime"])).total_seconds() for name, st in done.items()}
    assert ran["timed"] >= RUN_SECONDS, ran  # whole seconds: the pod ran at least its time
    assert ran["plain"] < RUN_SECONDS, ran
    assert all(st.get("succeeded") == 1 for st in done.values()), done
