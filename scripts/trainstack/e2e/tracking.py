"""Experiment tracking on the local cluster (the chart's `tracking`, docs/tracking.md): what the e2e turns
on, and the checks that the TrainJobs' runs are in MLflow.

`trainstack e2e` on real nodes installs the chart with tracking on for its smoke namespace and for a
second namespace (OTHER_NS) whose account must not see the first's runs. `check_runs` forwards a loopback
port to the tracking Service (`kubectl port-forward`: the host never connects to a pod or service
address) and reads runs back with MLflow's client (the lock's `tracking.client`, in a virtual environment
under the trainstack cache), as the smoke namespace's account: for each example TrainJob (torch, JAX,
XGBoost) one run named after it, FINISHED, its parameters, its metric at every step, its final metrics and
its model's artifact (EXPECTED); for a TrainJob restarted after a killed worker, a FAILED run per failed
attempt and a FINISHED one at last. Then, as OTHER_NS's account: a run is refused and the smoke
namespace's experiment is not listed.
"""

from __future__ import annotations

import base64
import json
import os
import re
import select
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .. import kubeapi, monitoring, proc, tools, trainenv
from .. import lock as lockmod
from ..errors import UserError
from ..kubectl import Kubectl
from .base import NAMESPACE, SMOKE_NS

SERVICE = "trainstack-tracking"
PORT = 5000  # tracking.port in the values the e2e installs (values())
METRICS_SERVICE = f"{SERVICE}-metrics"  # the server's request metrics (its `metrics` sidecar, no login)
METRICS_PORT = 9102  # tracking.metricsPort in the values the e2e installs (values())
SECRET = "trainstack-tracking"  # in each tracked namespace: username, password
UI_EXAMPLE = "http://127.0.0.1:5000"  # `kubectl port-forward svc/trainstack-tracking 5000` (docs/tracking.md)
OTHER_NS = "trainstack-e2e-other"  # a second tracked namespace: its account must not read SMOKE_NS's runs


def namespaces(extra: tuple[str, ...] = ()) -> list[str]:
    """The namespaces the e2e tracks: its smoke namespace, OTHER_NS and EXTRA (each exists before the install)."""
    return list(dict.fromkeys([SMOKE_NS, OTHER_NS, *extra]))


def values(port: int = PORT, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """The chart values that turn tracking on for the e2e's namespaces (`namespaces(EXTRA)`), on the ports the
    checks forward to."""
    return {"tracking": {"enabled": True, "namespaces": namespaces(extra), "port": port, "metricsPort": METRICS_PORT}}


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
def forwarded(kube: Any, lock: lockmod.Lock, port: int = PORT, timeout: float = 60,
              service: str = SERVICE) -> Iterator[str]:
    """http://127.0.0.1:<free port>, forwarded to PORT of the tracking Service (or SERVICE) by `kubectl
    port-forward`."""
    kubectl = Kubectl(kube.kubeconfig, lock=lock, binary=tools.require_kubectl(lock))
    cmd = kubectl.line("port-forward", "--address", "127.0.0.1", "-n", NAMESPACE, f"svc/{service}", f":{port}")
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
                raise TrackingFailure(f"kubectl port-forward to svc/{service} {why}: {' '.join(seen[-2:])[:300]}")
            seen.append(line.strip())
            found = re.search(r"Forwarding from 127\.0\.0\.1:(\d+)", line)
            local = int(found.group(1)) if found else 0
        yield f"http://127.0.0.1:{local}"
    finally:
        process.kill()
        process.wait()


# Runs in the client's virtual environment: reads the runs of each name as its namespace's account, then tries the
# first one found as the other account.
READER = r"""
import json, os, sys
import mlflow
from mlflow.exceptions import MlflowException
uri, experiment, names = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
client = mlflow.MlflowClient(uri)
found = client.get_experiment_by_name(experiment)

def artifacts(run_id, path=None):
    out = []
    for item in client.list_artifacts(run_id, path):
        out.extend(artifacts(run_id, item.path) if item.is_dir else [item.path])
    return out

out = {"runs": {}}
for name in names:
    runs = client.search_runs([found.experiment_id], filter_string=f"attributes.run_name = '{name}'",
                              order_by=["attributes.start_time ASC"]) if found else []
    out["runs"][name] = [{"run_id": r.info.run_id, "status": r.info.status, "params": r.data.params,
                          "metrics": r.data.metrics, "artifacts": artifacts(r.info.run_id),
                          "histories": {k: [m.step for m in client.get_metric_history(r.info.run_id, k)]
                                        for k in r.data.metrics}} for r in runs]
first = next((runs[0] for runs in out["runs"].values() if runs), None)
if first:
    os.environ["MLFLOW_TRACKING_USERNAME"], os.environ["MLFLOW_TRACKING_PASSWORD"] = sys.argv[4:6]
    other = mlflow.MlflowClient(uri)
    try:
        other.get_run(first["run_id"])
        out["other_reads_run"] = True
    except MlflowException as err:
        out["other_reads_run"] = False
        out["other_refusal"] = str(err).splitlines()[0][:200]
    out["other_sees"] = sorted(e.name for e in other.search_experiments())
print(json.dumps(out))
"""


@dataclass(frozen=True)
class Expected:
    """What an example script logs (examples/trainstack_tracking.py): a metric at every step, the parameter that
    says how many steps, its final metrics and its model's artifact."""
    history: str
    steps_param: str
    final: tuple[str, ...]
    artifact: str


EXPECTED = {
    "torch": Expected("loss", "steps", ("final_loss", "train_s"), "checkpoint/checkpoint.pt"),
    "jax": Expected("loss", "steps", ("final_loss", "weight_error"), "model/weights.npy"),
    "xgboost": Expected("train_logloss", "rounds", ("test_accuracy", "test_logloss"), "model/model.json"),
    "mlx": Expected("loss", "steps", ("final_loss", "weight_error"), "model/weights.npy"),
}


def _client(script: str, args: list[str], own: tuple[str, str], lock: lockmod.Lock, what: str) -> dict[str, Any]:
    """Run SCRIPT (it prints one JSON line) in the MLflow client's virtual environment as OWN's account."""
    python = trainenv.package_venv("mlflow-client", [str(p) for p in lock.get("tracking", "client")])
    env = {"MLFLOW_TRACKING_USERNAME": own[0], "MLFLOW_TRACKING_PASSWORD": own[1],
           "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "PYTHONWARNINGS": "ignore"}
    result = proc.run([str(python), "-c", script, *args], check=False, timeout=120, env={**os.environ, **env},
                      what="MLflow client")
    if result.returncode != 0:
        raise TrackingFailure(f"reading {what} from MLflow failed: {result.stderr.strip()[-300:]}")
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def read_runs(uri: str, experiment: str, names: list[str], own: tuple[str, str], other: tuple[str, str],
              lock: lockmod.Lock) -> dict[str, Any]:
    """What MLflow holds of the runs named NAMES in EXPERIMENT (as OWN, oldest first), and whether OTHER reads
    the first of them."""
    return _client(READER, [uri, experiment, json.dumps(names), *other], own, lock, f"runs {', '.join(names)}")


WRITER = r"""
import json, sys
import mlflow
uri, experiment, run_name = sys.argv[1:4]
mlflow.set_tracking_uri(uri)
mlflow.set_experiment(experiment)
with mlflow.start_run(run_name=run_name) as run:
    mlflow.log_param("steps", 3)
    for step in (1, 2, 3):
        mlflow.log_metric("loss", 1.0 / step, step=step)
print(json.dumps({"run_id": run.info.run_id}))
"""


def log_run(uri: str, experiment: str, run_name: str, own: tuple[str, str], lock: lockmod.Lock) -> str:
    """Log a small run (a parameter, the loss at 3 steps) named RUN_NAME in EXPERIMENT as OWN: its ID."""
    return str(_client(WRITER, [uri, experiment, run_name], own, lock, f"run {run_name} (logging it)")["run_id"])


MODEL_READER = r"""
import json, sys
import mlflow
uri, name, version = sys.argv[1:4]
client = mlflow.MlflowClient(uri)
found = client.get_model_version(name, version)
run = client.get_run(found.run_id)
print(json.dumps({"name": found.name, "version": found.version, "status": found.status, "source": found.source,
                  "run_id": found.run_id, "run_name": run.info.run_name, "run_status": run.info.status,
                  "experiment_id": run.info.experiment_id, "tags": found.tags}))
"""


def read_model_version(uri: str, name: str, version: str, own: tuple[str, str], lock: lockmod.Lock) -> dict[str, Any]:
    """Registered model NAME's VERSION as OWN reads it: its status, source, tags and the run it came from."""
    return _client(MODEL_READER, [uri, name, version], own, lock, f"model {name} version {version}")


def run_problems(runs: list[dict[str, Any]], name: str, kind: str, steps: int) -> list[str]:
    """What the one run named NAME of a KIND example (EXPECTED) that ran STEPS steps lacks, a phrase each."""
    if len(runs) != 1:
        return [f"{len(runs)} runs named {name}, not 1"]
    run, want = runs[0], EXPECTED[kind]
    problems = []
    if run["status"] != "FINISHED":
        problems.append(f"status {run['status']}")
    logged = run["histories"].get(want.history, [])
    if logged != list(range(1, steps + 1)):
        problems.append(f"{want.history} logged at {len(logged)} steps, not at each of {steps}")
    if run["params"].get(want.steps_param) != str(steps) or "world_size" not in run["params"]:
        problems.append(f"parameters {sorted(run['params'])[:8]}")
    missing = [k for k in want.final if k not in run["metrics"]]
    if missing:
        problems.append(f"no {', '.join(missing)} among the metrics {sorted(run['metrics'])}")
    if want.artifact not in run["artifacts"]:
        problems.append(f"no {want.artifact} artifact ({run['artifacts']})")
    return problems


def attempt_problems(runs: list[dict[str, Any]], name: str) -> list[str]:
    """A TrainJob whose pods were restarted after a failure: one run per attempt, every attempt before the last
    ended FAILED (its rank 0 saw the failure), the last FINISHED."""
    statuses = [r["status"] for r in runs]
    if len(runs) < 2 or statuses[-1] != "FINISHED" or set(statuses[:-1]) != {"FAILED"}:
        return [f"the runs named {name} ended {statuses}, not FAILED for each failed attempt and FINISHED at last"]
    return []


def isolation_problems(read: dict[str, Any]) -> list[str]:
    """Whether the other namespace's account read the first run, or lists this namespace's experiment."""
    if "other_reads_run" not in read:
        return []
    if read["other_reads_run"] or SMOKE_NS in read["other_sees"]:
        return [f"{OTHER_NS}'s account reads a run or lists experiment {SMOKE_NS}: {read['other_sees']}"]
    return []


def check_runs(kube: Any, lock: lockmod.Lock, finished: dict[str, tuple[str, int]],
               restarted: tuple[str, ...] = ()) -> dict[str, Any]:
    """Read back through a forwarded port, as SMOKE_NS's account, the runs of the TrainJobs in FINISHED (name:
    (kind, steps), each one FINISHED run with all EXPECTED of its kind) and RESTARTED (attempt_problems), and
    check OTHER_NS's account is refused them; a TrackingFailure names everything missing."""
    own, other = credential(kube, SMOKE_NS), credential(kube, OTHER_NS)
    with forwarded(kube, lock) as uri:
        read = read_runs(uri, SMOKE_NS, [*finished, *restarted], own, other, lock)
    problems = [f"{name}: {p}" for name, (kind, steps) in finished.items()
                for p in run_problems(read["runs"][name], name, kind, steps)]
    problems += [p for name in restarted for p in attempt_problems(read["runs"][name], name)]
    problems += isolation_problems(read)
    if problems:
        raise TrackingFailure(f"runs in MLflow (experiment {SMOKE_NS}): {'; '.join(problems)}")
    return read


_REQUESTS = re.compile(r'^mlflow_http_request_total\{([^}]*)\}\s+(\S+)', re.MULTILINE)


def requests_by_status(text: str) -> dict[str, float]:
    """status -> requests counted, from the tracking server's metrics text (`mlflow_http_request_total`)."""
    out: dict[str, float] = {}
    for labels, value in _REQUESTS.findall(text):
        status = re.search(r'status="([^"]*)"', labels)
        if status:
            out[status.group(1)] = out.get(status.group(1), 0.0) + float(value)
    return out


def metrics_problems(text: str, report: dict[str, list[str]]) -> list[str]:
    """What the tracking server's metrics lack after the runs were read: a series the shipped alerts use
    (REPORT, monitoring.verify_scrape), answered requests, or the refused ones (the other team's)."""
    counted = requests_by_status(text)
    problems = [f"the alerts use {name}, which the server did not serve" for name in report["missing"]]
    if not any(status.startswith("2") and n > 0 for status, n in counted.items()):
        problems.append(f"no answered request counted (by status: {counted})")
    if not any(status in ("401", "403") and n > 0 for status, n in counted.items()):
        problems.append(f"no refused request counted (by status: {counted})")
    return problems


def check_metrics(kube: Any, lock: lockmod.Lock, port: int = METRICS_PORT) -> dict[str, Any]:
    """Scrape the tracking server's metrics Service through a forwarded port, as Prometheus would (no
    login): every series the shipped alerts use is served and the requests so far are counted by status.
    A TrackingFailure names what is missing."""
    with forwarded(kube, lock, port=port, service=METRICS_SERVICE) as uri:
        try:
            with urllib.request.urlopen(f"{uri}/metrics", timeout=15) as response:
                text = response.read().decode()
        except OSError as err:
            raise TrackingFailure(f"GET {METRICS_SERVICE}:{port}/metrics: {err}") from None
    report = monitoring.verify_scrape({monitoring.TRACKING: text})[monitoring.TRACKING]
    problems = metrics_problems(text, report)
    if problems:
        raise TrackingFailure(f"the tracking server's metrics ({METRICS_SERVICE}): {'; '.join(problems)}")
    return {"requests": requests_by_status(text), "alerts_use": report["present"]}
