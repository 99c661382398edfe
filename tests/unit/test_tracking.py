"""Experiment tracking without a cluster: the images carry MLflow (the server's and the client's pins from
one place in the lock), the e2e's values, and what the e2e's check calls a missing piece of a run."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from trainstack import images, paths, trainenv, yamlio
from trainstack.e2e import tracking
from trainstack.e2e.base import SMOKE_NS
from trainstack.e2e.providers import local as localprov

STEPS = 3
GOOD = {"run_id": "r1", "status": "FINISHED", "histories": {"loss": [1, 2, 3], "final_loss": [0]},
        "params": {"steps": "3", "world_size": "2"}, "metrics": {"final_loss": 0.1, "loss": 0.1, "train_s": 1.0},
        "artifacts": ["checkpoint/checkpoint.pt"]}


def test_the_server_image_installs_the_locks_server_pins_under_mlflows_own_name(lock):
    entry = images.spec("mlflow", lock)
    assert entry["pythonPackages"] == lock.get("tracking", "server")
    assert any(p.startswith("mlflow[auth]==") for p in entry["pythonPackages"])
    assert images.reference("mlflow", lock).endswith(f"/{lock.image('mlflow').repository}:{lock.image('mlflow').tag}")
    server = {p.split("==")[0]: p.split("==")[1] for p in lock.get("tracking", "server")}
    client = {p.split("==")[0]: p.split("==")[1] for p in lock.get("tracking", "client")}
    assert client["mlflow-skinny"] == server["mlflow-skinny"] == server["mlflow[auth]"]
    # every package pinned exactly, in both lists
    assert all(p.count("==") == 1 for p in [*lock.get("tracking", "server"), *lock.get("tracking", "client")])


@pytest.fixture
def torch_wheel(lock, monkeypatch, tmp_path):
    """The torch image's tag and install come from the cached torch wheel (its version, its requirements): where
    `make setup` has not downloaded it (the unit tier needs no setup), a stand-in of a version the lock allows,
    with torch's metadata and nothing else, in a wheel folder of the test's."""
    if trainenv._cached_wheel("torch", trainenv.pins(lock)["torch"]) is None:
        monkeypatch.setattr(trainenv, "wheel_dir", lambda: tmp_path)
        tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
        with zipfile.ZipFile(tmp_path / f"torch-2.9.1-{tag}-{tag}-manylinux_2_28_x86_64.whl", "w") as wheel:
            wheel.writestr("torch-2.9.1.dist-info/METADATA", "Name: torch\nVersion: 2.9.1\n"
                           "Requires-Dist: filelock\nRequires-Dist: numpy; extra == \"numpy\"\n")


@pytest.mark.parametrize("name", ["torch-cpu", "jax-cpu", "xgboost-cpu", "mlx-cpu"])
def test_every_training_image_carries_the_client_in_its_one_install(lock, name, torch_wheel):
    recipe = images.recipe(name, lock)
    assert images.spec(name, lock)["trackingClient"] == lock.get("tracking", "client")
    assert "MLflow's client" in recipe.source
    # the client is part of the build key: a new client pin rebuilds the image
    saved = lock.data["builtImages"][name]["trackingClient"]
    try:
        lock.data["builtImages"][name]["trackingClient"] = [*saved[:-1], "zipp==0.0.1"]
        assert images.recipe(name, lock).key != recipe.key
    finally:
        lock.data["builtImages"][name]["trackingClient"] = saved


def test_e2e_values_turn_tracking_on_for_both_namespaces_on_the_clusters_storage(lock, tmp_path, torch_wheel):
    values = yamlio.load(localprov.mirror_values(lock, tmp_path / "v.yaml", tracking=True).read_text())
    assert values["tracking"]["enabled"] is True
    assert values["tracking"]["namespaces"] == [SMOKE_NS, tracking.OTHER_NS]
    assert values["tracking"]["storage"]["storageClassName"]
    assert "tracking" not in yamlio.load(localprov.mirror_values(lock, tmp_path / "w.yaml").read_text())


def test_a_kwok_only_cluster_never_runs_the_server(tmp_path):
    assert localprov.LocalProvider(tmp_path, nodes="kwok", tracking=True).tracking is False
    assert localprov.LocalProvider(tmp_path, nodes="real", tracking=True).tracking is True


def test_a_complete_run_has_no_problems():
    assert tracking.run_problems([GOOD], "job", "torch", STEPS) == []


@pytest.mark.parametrize(("runs", "phrase"), [
    ([], "0 runs named job"),
    ([GOOD, GOOD], "2 runs named job"),
    ([{**GOOD, "status": "FAILED"}], "status FAILED"),
    ([{**GOOD, "histories": {"loss": [1, 3]}}], "loss logged at 2 steps, not at each of 3"),
    ([{**GOOD, "params": {"steps": "3"}}], "parameters"),
    ([{**GOOD, "metrics": {"loss": 1.0, "train_s": 1.0}}], "no final_loss among"),
    ([{**GOOD, "artifacts": []}], "no checkpoint/checkpoint.pt artifact"),
])
def test_each_missing_piece_of_a_run_is_named(runs, phrase):
    problems = tracking.run_problems(runs, "job", "torch", STEPS)
    assert len(problems) == 1 and phrase in problems[0], problems


def test_each_example_is_held_to_its_own_metrics_and_model():
    xgboost = {**GOOD, "histories": {"train_logloss": [1, 2, 3]}, "params": {"rounds": "3", "world_size": "2"},
               "metrics": {"test_accuracy": 0.9, "test_logloss": 0.3}, "artifacts": ["model/model.json"]}
    assert tracking.run_problems([xgboost], "job", "xgboost", STEPS) == []
    problems = tracking.run_problems([xgboost], "job", "jax", STEPS)  # a JAX run logs loss and its weights
    assert [p.split(" ")[0] for p in problems] == ["loss", "parameters", "no", "no"], problems


@pytest.mark.parametrize(("statuses", "good"), [
    (["FAILED", "FINISHED"], True),
    (["FAILED", "FAILED", "FINISHED"], True),
    (["FINISHED"], False),  # the killed attempt left no run
    (["RUNNING", "FINISHED"], False),  # its rank 0 never ended it
    (["FAILED", "FAILED"], False),
])
def test_a_restarted_job_has_a_failed_run_per_failed_attempt(statuses, good):
    problems = tracking.attempt_problems([{**GOOD, "status": s} for s in statuses], "job")
    assert (problems == []) is good, problems


@pytest.mark.parametrize(("read", "good"), [
    ({"runs": {}}, True),
    ({"other_reads_run": False, "other_sees": [tracking.OTHER_NS]}, True),
    ({"other_reads_run": True, "other_sees": [tracking.OTHER_NS]}, False),
    ({"other_reads_run": False, "other_sees": [SMOKE_NS, tracking.OTHER_NS]}, False),
])
def test_another_namespace_reading_a_run_or_listing_the_experiment_is_named(read, good):
    assert (tracking.isolation_problems(read) == []) is good


SCRAPE = '''# TYPE mlflow_http_request_total counter
mlflow_http_request_total{method="GET",status="200"} 12.0
mlflow_http_request_total{method="POST",status="200"} 30.0
mlflow_http_request_total{method="GET",status="403"} 2.0
mlflow_http_request_duration_seconds_count{method="GET",mlflow_version="3.17.2",status="200"} 12.0
'''


def test_the_servers_requests_are_summed_by_status():
    assert tracking.requests_by_status(SCRAPE) == {"200": 42.0, "403": 2.0}
    assert tracking.requests_by_status("# nothing yet\n") == {}


def test_metrics_missing_an_alerts_series_or_a_kind_of_request_are_named():
    served = {"present": ["mlflow_http_request_total"], "missing": []}
    assert tracking.metrics_problems(SCRAPE, served) == []
    problems = tracking.metrics_problems(SCRAPE, {"present": [], "missing": ["mlflow_http_request_total"]})
    assert problems == ["the alerts use mlflow_http_request_total, which the server did not serve"]
    only_refused = SCRAPE.replace('status="200"', 'status="401"')
    assert [p.split(" (")[0] for p in tracking.metrics_problems(only_refused, served)] == [
        "no answered request counted"]
    never_refused = SCRAPE.replace('status="403"', 'status="200"')
    assert [p.split(" (")[0] for p in tracking.metrics_problems(never_refused, served)] == [
        "no refused request counted"]


def _catches_sigterm(pid: int) -> bool:
    """Whether process PID has a handler for SIGTERM (/proc/PID/status, SigCgt: a mask, bit N-1 for signal N)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    return False


def test_the_accounts_sidecar_stops_on_sigterm(tmp_path):
    """The accounts sidecar runs `accounts.py sync` as its container's PID 1, and the kernel delivers PID 1 no
    signal it has no handler for: without its own SIGTERM handler, every stop of the tracking pod (each upgrade's
    Recreate) waited out the pod's 30 s grace period before the kubelet killed it. Here, waiting for a server that
    never answers, the sidecar has a SIGTERM handler, and SIGTERM ends it at once through it (exit 0, not the
    signal's default action)."""
    with socket.socket() as s:  # a port nothing listens on: the sidecar keeps waiting for the server
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = paths.repo_root() / "charts/trainstack/files/tracking/accounts.py"
    proc = subprocess.Popen([sys.executable, str(script), "sync"], env={"PATH": "/usr/bin:/bin", "PORT": str(port)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while not _catches_sigterm(proc.pid):
            assert proc.poll() is None and time.monotonic() < deadline, "no SIGTERM handler"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0, proc.communicate()[0]
    finally:
        proc.kill()
        proc.communicate()
