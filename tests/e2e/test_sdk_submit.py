"""examples/sdk_submit.py: the TrainJob the Kubeflow SDK would create, and that its command really trains.

No cluster is contacted: --dry-run builds the TrainJob with the SDK's own code, and the trainer
command in it is run here the way a node runs it (torchrun reading PET_* variables).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from trainstack import smoke
from trainstack.cluster.local import free_port

BESIDE_REAL_NODES = True  # KWOK clusters and local processes only (tests/e2e/conftest.py)

SCRIPT = ROOT / "examples" / "sdk_submit.py"
pytestmark = pytest.mark.slow  # needs the Kubeflow SDK that `make setup` installs


def _sdk(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], check=False, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})}, cwd=cwd or ROOT)


@pytest.fixture(scope="module", autouse=True)
def sdk_installed() -> None:
    probe = subprocess.run([sys.executable, "-c", "import kubeflow.trainer"], check=False, capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.fail("the Kubeflow SDK is not installed: run 'make setup' (it runs 'trainstack smoke install')")


def _dry_run(*args: str) -> dict:
    result = _sdk("--dry-run", *args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_defaults_to_the_torch_distributed_runtime_and_two_nodes():
    job = _dry_run()
    assert (job["apiVersion"], job["kind"]) == ("trainer.kubeflow.org/v1alpha1", "TrainJob")
    assert job["spec"]["runtimeRef"] == {"name": "torch-distributed", "kind": "ClusterTrainingRuntime"}
    assert job["spec"]["trainer"]["numNodes"] == 2
    assert "resourcesPerNode" not in job["spec"]["trainer"] and "image" not in job["spec"]["trainer"]


def test_flags_reach_the_trainjob():
    job = _dry_run("--runtime", "torch-cpu", "--num-nodes", "3", "--namespace", "team-a", "--cpu", "2",
                   "--memory", "4Gi", "--", "--steps", "7")
    trainer = job["spec"]["trainer"]
    assert job["spec"]["runtimeRef"]["name"] == "torch-cpu"
    assert job["metadata"]["namespace"] == "team-a"
    assert trainer["numNodes"] == 3
    assert trainer["resourcesPerNode"]["requests"] == {"cpu": "2", "memory": "4Gi"}
    command = trainer["command"]
    assert command[:2] == ["bash", "-c"] and 'torchrun "sdk_submit.py"' in command[2]
    assert "'argv': ['--steps', '7']" in command[2]
    assert "def build_model(features: int, hidden: int) -> nn.Module:" in command[2]  # train_ddp.py travels
    assert "'helpers': {'trainstack_tracking.py': " in command[2] and "class Tracker:" in command[2]  # and its helper


def test_gpu_flag_asks_for_nvidia_gpus():
    trainer = _dry_run("--gpu", "4")["spec"]["trainer"]
    assert trainer["resourcesPerNode"]["limits"] == {"nvidia.com/gpu": "4"}


def test_submit_without_a_cluster_is_one_clear_line(tmp_path):
    result = _sdk("--num-nodes", "2", env={"KUBECONFIG": str(tmp_path / "missing"), "HOME": str(tmp_path)})
    assert result.returncode == 1
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr


def test_shell_special_training_arguments_are_refused():
    result = _sdk("--dry-run", "--", "--output-dir", "$HOME")
    assert result.returncode == 2 and "must not contain" in result.stderr


@pytest.mark.torch
def test_the_submitted_command_trains_on_a_node(tmp_path):
    """Run spec.trainer.command as container `node` would: bash, torchrun, the PET_* of a 1-node job."""
    command = _dry_run("--num-nodes", "1", "--", "--steps", "6")["spec"]["trainer"]["command"]
    pet = smoke.pet_env("sdk-job", 1, 0, {"requests": {"cpu": "1"}}, master_addr="127.0.0.1",
                        master_port=free_port())
    env = {**pet, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "TRAINSTACK_OUTPUT_DIR": str(tmp_path / "output"), "GLOO_SOCKET_IFNAME": "lo",
           "PYTHONWARNINGS": "ignore:Failed to initialize NumPy"}
    node = {"rank": 0, "argv": command, "env": env, "stdout": str(tmp_path / "node-0.stdout.log"),
            "stderr": str(tmp_path / "node-0.stderr.log")}
    outcome = smoke._launch_isolated({"nodes": [node], "cwd": str(tmp_path), "timeout": 300}, tmp_path,
                                     smoke._unshare_argv())
    assert outcome["exit_codes"] == [0], smoke.failure_lines(node, 10)
    events = smoke.read_events(tmp_path / "node-0.stdout.log")
    assert [e["step"] for e in events if e["event"] == "step"] == [1, 2, 3, 4, 5, 6]
    done = next(e for e in events if e["event"] == "done")
    assert done["checkpoint"] == str(tmp_path / "output" / "checkpoint.pt")
    assert smoke.check_checkpoint(sys.executable, Path(done["checkpoint"]))["step"] == 6
