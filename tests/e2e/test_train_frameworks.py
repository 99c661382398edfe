"""examples/train_jax.py and examples/train_xgboost.py, run as Kubeflow Trainer runs them: one process
per `node` pod with exactly the variables its JAX and XGBoost plugins (v2.3.0) inject (petenv), the
packages exactly those the jax-cpu and xgboost-cpu images pin (a venv in ~/.cache/trainstack).

The only difference from a cluster: pod 0's address is 127.0.0.1 instead of its headless-Service
name, and the processes share a private network namespace (loopback only) when the kernel allows one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import ROOT
from trainstack import images, petenv, smoke, trainenv
from trainstack.cluster.common import free_port

BESIDE_REAL_NODES = True  # KWOK clusters and local processes only (tests/e2e/conftest.py)

pytestmark = pytest.mark.frameworks

EXAMPLES = ROOT / "examples"


@pytest.fixture(scope="module")
def venvs(lock) -> dict[str, str]:
    """The python of a venv per image, holding that image's pinned pythonPackages."""
    return {name: str(trainenv.package_venv(name, [str(r) for r in images.spec(name, lock)["pythonPackages"]]))
            for name in ("jax-cpu", "xgboost-cpu", "mlx-cpu")}


def run_nodes(tmp: Path, python: str, script: str, envs: list[dict[str, str]], args: list[str],
              timeout: int = 240) -> tuple[list[int], list[list[dict]]]:
    """Start one process per env (all at once), wait; (exit codes, each process's JSON events)."""
    nodes = [{"rank": rank, "pet": env, "argv": [python, str(EXAMPLES / script), *args],
              "env": {"PYTHONUNBUFFERED": "1", **env},
              "stdout": str(tmp / f"node-{rank}.out"), "stderr": str(tmp / f"node-{rank}.err")}
             for rank, env in enumerate(envs)]
    outcome = smoke.launch_nodes({"nodes": nodes, "cwd": str(tmp), "timeout": timeout}, tmp)
    events = [[json.loads(ln) for ln in Path(n["stdout"]).read_text().splitlines() if ln.startswith("{")]
              for n in nodes]
    for code, node in zip(outcome["exit_codes"], nodes, strict=True):
        assert code == 0, f"rank {node['rank']} exited {code}: {Path(node['stderr']).read_text()[-2000:]}"
    return outcome["exit_codes"], events


def one(events: list[dict], kind: str) -> dict:
    found = [e for e in events if e.get("event") == kind]
    assert len(found) == 1, f"expected one {kind!r} event, got {found}"
    return found[0]


def jax_envs(nodes: int) -> list[dict[str, str]]:
    port = free_port()
    # off-cluster only: the coordinator listens on loopback rather than every address
    return [{**petenv.jax_env("train-jax", nodes, rank, coordinator_host="127.0.0.1", port=port),
             "JAX_COORDINATOR_BIND_ADDRESS": f"127.0.0.1:{port}"} for rank in range(nodes)]


def xgboost_envs(nodes: int) -> list[dict[str, str]]:
    port = free_port()
    return [petenv.xgboost_env("train-xgb", nodes, rank, {"requests": {"cpu": "1"}}, tracker_host="127.0.0.1",
                               port=port) for rank in range(nodes)]


def test_jax_two_processes_train_one_model_with_a_cross_process_all_reduce(venvs, tmp_path):
    codes, events = run_nodes(tmp_path, venvs["jax-cpu"], "train_jax.py", jax_envs(2), ["--steps", "150"])
    assert codes == [0, 0]
    starts, dones = [one(e, "start") for e in events], [one(e, "done") for e in events]
    assert [s["rank"] for s in starts] == [0, 1]
    assert all(s["world_size"] == 2 and s["devices"] == 2 for s in starts)
    assert all(s["allreduce"] == s["allreduce_expected"] == 3.0 for s in starts)  # 1 + 2, across processes
    for done in dones:
        assert done["loss_last"] < 1e-3 < done["loss_first"], done
        assert done["weight_error"] < 0.05
    assert dones[0]["weights_sha256"] == dones[1]["weights_sha256"]  # the same weights on both processes
    assert dones[0]["loss_last"] == dones[1]["loss_last"]  # the global loss, not a shard's


def test_jax_one_process_trains_alone(venvs, tmp_path):
    codes, events = run_nodes(tmp_path, venvs["jax-cpu"], "train_jax.py", jax_envs(1), ["--steps", "150"])
    assert codes == [0]
    assert one(events[0], "start")["world_size"] == 1
    done = one(events[0], "done")
    assert done["loss_last"] < 1e-3 < done["loss_first"]


def test_xgboost_two_workers_train_one_model_that_beats_the_baseline(venvs, tmp_path):
    codes, events = run_nodes(tmp_path, venvs["xgboost-cpu"], "train_xgboost.py", xgboost_envs(2),
                              ["--rounds", "30", "--tracker-host", "127.0.0.1"])
    assert codes == [0, 0]
    starts, dones = [one(e, "start") for e in events], [one(e, "done") for e in events]
    assert [s["rank"] for s in starts] == [0, 1]
    assert all(s["world_size"] == 2 and s["allreduce"] == 3.0 for s in starts)
    for done in dones:
        assert done["same_model_as_rank0"]
        assert done["test_accuracy"] > done["baseline_accuracy"] + 0.2, done
        assert done["test_logloss"] < 0.6 * done["baseline_logloss"], done
        assert done["train_logloss_last"] < done["train_logloss_first"]
    assert dones[0]["model_sha256"] == dones[1]["model_sha256"]
    rounds = [[r["train_logloss"] for r in e if r.get("event") == "round"] for e in events]
    assert rounds[0] == rounds[1]  # the training metric is all-reduced: both workers report all the data's


def test_xgboost_one_worker_and_no_tracker(venvs, tmp_path):
    for envs in (xgboost_envs(1), [{}]):  # Trainer with numNodes 1; a plain `python train_xgboost.py`
        work = tmp_path / str(len(envs[0]))
        work.mkdir()
        codes, events = run_nodes(work, venvs["xgboost-cpu"], "train_xgboost.py", envs,
                                  ["--rounds", "20", "--tracker-host", "127.0.0.1"])
        done = one(events[0], "done")
        assert codes == [0] and done["world_size"] == 1
        assert done["test_accuracy"] > done["baseline_accuracy"] + 0.2


def test_mlx_one_process_trains_alone(venvs, tmp_path):
    """examples/train_mlx.py outside mpirun (no MPI here: its two ranks train over OpenMPI on the embedded
    cluster's two real nodes in make e2e): a group of one, the all_sum its own, the loss falls."""
    codes, events = run_nodes(tmp_path, venvs["mlx-cpu"], "train_mlx.py", [{}], ["--steps", "100"])
    start, done = one(events[0], "start"), one(events[0], "done")
    assert codes == [0] and start["world_size"] == 1 and start["allreduce"] == start["allreduce_expected"] == 1.0
    assert done["loss_last"] < 1e-3 < done["loss_first"] and done["weight_error"] < 0.05, done


def test_mlx_under_mpirun_refuses_to_train_alone(venvs, tmp_path):
    """Told by mpirun's variable that 2 ranks were started, a process that MLX cannot put in an MPI group of 2 (no
    mpirun here) fails with one line instead of training as a silent group of one."""
    with pytest.raises(AssertionError, match="rank 0 exited 1") as failed:
        run_nodes(tmp_path, venvs["mlx-cpu"], "train_mlx.py", [{"OMPI_COMM_WORLD_SIZE": "2"}], ["--steps", "5"])
    assert "train_mlx.py: mpirun started 2 ranks but MLX" in str(failed.value)
    assert "Traceback" not in str(failed.value)


@pytest.mark.parametrize(("runtime", "script", "venv", "envs", "args"), [
    ("jax-distributed", "train_jax.py", "jax-cpu", jax_envs, ["--steps", "100"]),
    ("xgboost-distributed", "train_xgboost.py", "xgboost-cpu", xgboost_envs, ["--rounds", "20"]),
])
def test_the_sdk_command_trains_on_two_nodes(venvs, tmp_path, runtime, script, venv, envs, args):
    """spec.trainer.command of examples/sdk_submit.py --script (the Kubeflow SDK's own code builds it, offline),
    run as container `node` of each pod runs it: bash, the script written to the working directory, python."""
    import subprocess
    import sys

    dry = subprocess.run([sys.executable, str(EXAMPLES / "sdk_submit.py"), "--dry-run", "--runtime", runtime,
                          "--script", str(EXAMPLES / script), "--", *args], capture_output=True, text=True,
                         timeout=120)
    assert dry.returncode == 0, dry.stderr[-2000:]
    command = json.loads(dry.stdout)["spec"]["trainer"]["command"]
    assert command[:2] == ["bash", "-c"] and 'python "sdk_submit.py"' in command[2]
    path = f"{Path(venvs[venv]).parent}:/usr/bin:/bin"
    nodes = []
    for rank, env in enumerate(envs(2)):
        workdir = tmp_path / f"pod-{rank}"  # each pod its own working directory, where the SDK writes the script
        workdir.mkdir()
        nodes.append({"rank": rank, "argv": ["env", "-C", str(workdir), *command],
                      "env": {**env, "PATH": path, "PYTHONUNBUFFERED": "1"},
                      "stdout": str(tmp_path / f"node-{rank}.out"), "stderr": str(tmp_path / f"node-{rank}.err")})
    outcome = smoke.launch_nodes({"nodes": nodes, "cwd": str(tmp_path), "timeout": 240}, tmp_path)
    assert outcome["exit_codes"] == [0, 0], [smoke.failure_lines(n, 10) for n in nodes]
    for node in nodes:
        done = one(smoke.read_events(Path(node["stdout"])), "done")
        assert done["world_size"] == 2 and done["rank"] == node["rank"]
