"""Experiment tracking on the local cluster (the chart's `tracking`, docs/tracking.md): what the e2e turns
on, and the check that a TrainJob's run is in MLflow.

`trainstack e2e` on real nodes installs the chart with tracking on for its smoke namespace and for a
second namespace (OTHER_NS) whose account must not see the first's runs. After the SDK TrainJob, the
check forwards a loopback port to the tracking Service (`kubectl port-forward`: the host never connects
to a pod or service address) and reads the run back with MLflow's client (the lock's
`tracking.client`, in a virtual environment under the trainstack cache), as the smoke namespace's
account: the run named after the TrainJob, FINISHED, its parameters, the loss at every step, the final
metrics and the checkpoint artifact. Then, as OTHER_NS's account: the run is refused and the smoke
namespace's experiment is not listed.
"""

from __future__ import annotations

import base64
import json
import os
import re
import select
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .. import kubeapi, proc, tools, trainenv
from .. import lock as lockmod
from ..errors import UserError
from .base import NAMESPACE, SMOKE_NS

SERVICE = "trainstack-tracking"
SECRET = "trainstack-tracking"  # in each tracked namespace: username, password
OTHER_NS = "trainstack-e2e-other"  # a second tracked namespace: its account must not read SMOKE_NS's runs


def values(port: int = 5000) -> dict[str, Any]:
    """The chart values that turn tracking on for the e2e's namespaces (both exist before the install)."""
    return {"tracking": {"enabled": True, "namespaces": [SMOKE_NS, OTHER_NS], "port": port}}


class TrackingFailure(UserError):
    pass


def credential(kube: Any, namespace: str, timeout: float = 120) -> tuple[str, str]:
    """The (username, password) the accounts sidecar made for NAMESPACE (its Secret), watched until it exists."""
    api = kubeapi.for_kube(kube)
    found = kubeapi.wait_for(api, kubeapi.resource(api, "secrets", namespace), lambda objects: objects.get(SECRET),
                             timeout, field_selector=f"metadata.name={SECRET}")
    if not found:
        raise TrackingFailure(f"no Secret {namespace}/{SECRET} after {timeout:.0f}s: the tracking server's accounts "
                              f"sidecar did not make it (kubectl logs -n {NAMESPACE} deploy/{SERVICE} -c accounts)")
    data = found.get("data") or {}
    return (base64.b64decode(data.get("username", "")).decode(),
            base64.b64decode(data.get("password", "")).decode())


@contextmanager
def forwarded(kube: Any, lock: lockmod.Lock, port: int = 5000, timeout: float = 60) -> Iterator[str]:
    """http://127.0.0.1:<free port>, forwarded to the tracking Service by `kubectl port-forward`."""
    kubectl = tools.require("kubectl", lock)
    cmd = [str(kubectl), "--kubeconfig", str(kube.kubeconfig), "port-forward", "--address", "127.0.0.1",
           "-n", NAMESPACE, f"svc/{SERVICE}", f":{port}"]
    process = proc.start(cmd, stdout=proc.PIPE, stderr=proc.STDOUT, stdin=proc.DEVNULL, text=True,
                         what="kubectl port-forward")
    try:
        deadline = time.monotonic() + timeout
        seen: list[str] = []
        local = 0
        assert process.stdout is not None
        while not local:
            ready, _, _ = select.select([process.stdout], [], [], max(0.1, deadline - time.monotonic()))
            line = process.stdout.readline() if ready else ""
            if not line:
                why = "did not start" if not ready else "ended"
                raise TrackingFailure(f"kubectl port-forward to svc/{SERVICE} {why}: {' '.join(seen[-2:])[:300]}")
            seen.append(line.strip())
            found = re.search(r"Forwarding from 127\.0\.0\.1:(\d+)", line)
            local = int(found.group(1)) if found else 0
        yield f"http://127.0.0.1:{local}"
    finally:
        process.kill()
        process.wait()


# Runs in the client's virtual environment: reads one run as its namespace's account, then tries it as the other.
READER = r"""
import json, os, sys
import mlflow
from mlflow.exceptions import MlflowException
uri, experiment, run_name = sys.argv[1:4]
out = {}
client = mlflow.MlflowClient(uri)
found = client.get_experiment_by_name(experiment)
runs = client.search_runs([found.experiment_id], filter_string=f"attributes.run_name = '{run_name}'") if found else []
out["runs"] = len(runs)
if runs:
    run = runs[0]
    out.update(run_id=run.info.run_id, status=run.info.status, params=run.data.params, metrics=run.data.metrics,
               loss_steps=[m.step for m in client.get_metric_history(run.info.run_id, "loss")],
               artifacts=[a.path for a in client.list_artifacts(run.info.run_id, "checkpoint")])
    os.environ["MLFLOW_TRACKING_USERNAME"], os.environ["MLFLOW_TRACKING_PASSWORD"] = sys.argv[4:6]
    other = mlflow.MlflowClient(uri)
    try:
        other.get_run(run.info.run_id)
        out["other_reads_run"] = True
    except MlflowException as err:
        out["other_reads_run"] = False
        out["other_refusal"] = str(err).splitlines()[0][:200]
    out["other_sees"] = sorted(e.name for e in other.search_experiments())
print(json.dumps(out))
"""


def read_run(uri: str, experiment: str, run_name: str, own: tuple[str, str], other: tuple[str, str],
             lock: lockmod.Lock) -> dict[str, Any]:
    """What MLflow holds of RUN_NAME in EXPERIMENT (as OWN), and whether OTHER reads it."""
    python = trainenv.package_venv("mlflow-client", [str(p) for p in lock.get("tracking", "client")])
    env = {"MLFLOW_TRACKING_USERNAME": own[0], "MLFLOW_TRACKING_PASSWORD": own[1],
           "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "PYTHONWARNINGS": "ignore"}
    result = proc.run([str(python), "-c", READER, uri, experiment, run_name, *other], check=False, timeout=120,
                      env={**os.environ, **env}, what="MLflow client")
    if result.returncode != 0:
        raise TrackingFailure(f"reading run {run_name} from MLflow failed: {result.stderr.strip()[-300:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def run_problems(run: dict[str, Any], trainjob: str, steps: int) -> list[str]:
    """What the run read back (read_run's result) lacks, one phrase each; [] when it is all there."""
    if run.get("runs") != 1:
        return [f"{run.get('runs')} runs named {trainjob} in experiment {SMOKE_NS}, not 1"]
    problems = []
    if run["status"] != "FINISHED":
        problems.append(f"status {run['status']}")
    if run["loss_steps"] != list(range(1, steps + 1)):
        problems.append(f"loss logged at {len(run['loss_steps'])} steps, not at each of {steps}")
    if run["params"].get("steps") != str(steps) or "world_size" not in run["params"]:
        problems.append(f"parameters {sorted(run['params'])[:8]}")
    if "final_loss" not in run["metrics"]:
        problems.append(f"no final_loss among the metrics {sorted(run['metrics'])}")
    if "checkpoint/checkpoint.pt" not in run["artifacts"]:
        problems.append(f"no checkpoint artifact ({run['artifacts']})")
    if run["other_reads_run"] or SMOKE_NS in run["other_sees"]:
        problems.append(f"{OTHER_NS}'s account reads the run or lists experiment {SMOKE_NS}: {run['other_sees']}")
    return problems


def check_run(kube: Any, lock: lockmod.Lock, trainjob: str, steps: int) -> dict[str, Any]:
    """The SDK TrainJob's run, read back through a forwarded port; a TrackingFailure names what is missing."""
    own, other = credential(kube, SMOKE_NS), credential(kube, OTHER_NS)
    with forwarded(kube, lock) as uri:
        run = read_run(uri, SMOKE_NS, trainjob, own, other, lock)
    problems = run_problems(run, trainjob, steps)
    if problems:
        raise TrackingFailure(f"TrainJob {trainjob}'s run in MLflow: {'; '.join(problems)}")
    return run
