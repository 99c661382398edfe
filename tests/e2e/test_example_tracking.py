"""examples/train_ddp.py's tracking where there is nothing to track to: without MLflow, and with the lock's
MLflow client but a server that does not answer. Either way rank 0 prints one "tracking" line saying
so and the job trains to its end (exit 0, the checkpoint written). The run against a live server is
make e2e's (e2e/tracking.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT
from trainstack import trainenv

# beside the real-node groups (tests/e2e/conftest.py): local processes only, mostly waiting on MLflow's retries
# (the second real-node group has the kind provider's e2e)
BESIDE_REAL_NODES = True

pytestmark = [pytest.mark.torch, pytest.mark.slow]


def closed_port() -> int:
    with socket.socket() as s:  # bound and closed again: nothing listens there
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train(tmp_path, extra_path: str = "") -> tuple[list[dict], float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env.update(MLFLOW_TRACKING_URI=f"http://127.0.0.1:{closed_port()}", MLFLOW_EXPERIMENT_NAME="team-a",
               MLFLOW_RUN_NAME="job", MLFLOW_HTTP_REQUEST_MAX_RETRIES="2", MLFLOW_HTTP_REQUEST_TIMEOUT="10")
    # the lock's client appended after this interpreter's own packages (torch comes from here)
    code = ("import runpy, sys; sys.path.insert(0, 'examples'); "  # trainstack_tracking.py, beside the script
            f"sys.path.append({extra_path!r}) if {bool(extra_path)} else None; "
            "sys.argv = ['train_ddp.py', '--steps', '3', '--output-dir', sys.argv[1]]; "
            "runpy.run_path('examples/train_ddp.py', run_name='__main__')")
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, cwd=ROOT,
                            env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "checkpoint.pt").is_file()
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")], time.monotonic() - started


def test_without_mlflow_the_job_says_so_once_and_trains(tmp_path):
    lines, _ = train(tmp_path)
    tracking = [line for line in lines if line["event"] == "tracking"]
    assert [(t["ok"], "mlflow" in t["error"]) for t in tracking] == [(False, True)]
    assert lines[-1]["event"] == "done" and lines[-1]["steps_run"] == 3


def test_with_the_client_and_no_server_the_job_says_so_once_and_trains(lock, tmp_path):
    python = trainenv.package_venv("mlflow-client", [str(p) for p in lock.get("tracking", "client")])
    site = subprocess.run([str(python), "-c", "import mlflow, os; print(os.path.dirname(os.path.dirname(mlflow.__file__)))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # the client's venv holds its bytecode (trainenv.package_venv), so every tracking read does not compile mlflow
    assert list(Path(site, "mlflow", "__pycache__").glob("__init__.cpython-*.pyc")), site
    lines, seconds = train(tmp_path, site)
    tracking = [line for line in lines if line["event"] == "tracking"]
    # MLflow imported and tried the server: its request failed to connect
    assert len(tracking) == 1 and tracking[0]["ok"] is False, tracking
    assert tracking[0]["error"].startswith("MlflowException") and "NewConnectionError" in tracking[0]["error"], tracking
    assert lines[-1]["event"] == "done" and lines[-1]["steps_run"] == 3
    assert seconds < 120  # two short retries, not MLflow's default of minutes
