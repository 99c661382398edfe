"""The torch DDP smoke: PET_* follows the Trainer controller's rules, and a real two-node run trains."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from support.cli import assert_one_line_error, run_cli
from trainstack import smoke, trainenv
from trainstack.errors import UserError

BESIDE_REAL_NODES = True  # KWOK clusters and local processes only (tests/e2e/conftest.py)


@pytest.fixture(scope="module")
def torch_ready() -> None:
    try:
        smoke.probe_torch(sys.executable)
    except UserError as err:
        pytest.fail(f"{err.message}: run 'make setup' (it runs 'trainstack smoke install')")


@pytest.fixture(scope="module")
def two_node_run(torch_ready) -> dict:
    result = run_cli("smoke", "train", "--output", "json", timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


@pytest.mark.torch
@pytest.mark.slow
def test_two_cpu_nodes_train_and_checkpoint(two_node_run):
    run = two_node_run
    assert run["ok"] and run["backend"] == "gloo" and run["device"] == "cpu"
    assert (run["nodes"], run["nproc_per_node"], run["world_size"]) == (2, 1, 2)
    assert [r["exit_code"] for r in run["ranks"]] == [0, 0]
    assert len(run["losses"]) == run["steps"] == 30
    assert run["loss_end"] < run["loss_start"]
    assert run["checkpoint"]["loads"] and run["checkpoint"]["step"] == run["steps"]
    assert run["checkpoint"]["params"] > 0
    assert run["steps_per_s"] > 0 and run["wall_s"] > run["train_s"] > 0
    port = int(run["ranks"][0]["pet_env"]["PET_MASTER_PORT"])
    for rank in run["ranks"]:
        assert rank["pet_env"] == smoke.pet_env("smoke", 2, rank["node_rank"], {"requests": {"cpu": "1"}},
                                                master_addr="127.0.0.1", master_port=port)


@pytest.mark.torch
@pytest.mark.slow
def test_the_same_seed_gives_the_same_losses(two_node_run):
    again = run_cli("smoke", "train", "--output", "json", "--seed", str(two_node_run["seed"]), timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout)["losses"] == two_node_run["losses"]
    assert len(set(two_node_run["losses"])) > 1


@pytest.mark.torch
@pytest.mark.slow
def test_a_failing_rank_is_one_clear_line_with_its_log(torch_ready, tmp_path):
    workdir = tmp_path / "run"
    result = run_cli("smoke", "train", "--steps", "3", "--workdir", str(workdir), "--", "--bogus", timeout=600)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr + result.stdout
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and result.stderr.strip().splitlines()[-1] == errors[0], result.stderr
    assert errors[0].startswith("error: node ") and "exited with code 1" in errors[0]
    assert "unrecognized arguments: --bogus" in errors[0] and str(workdir) in errors[0]
    assert (workdir / "node-0.stderr.log").is_file()


@pytest.mark.torch
@pytest.mark.slow
def test_install_is_a_no_op_when_everything_is_there(torch_ready):
    result = run_cli("smoke", "install")
    assert result.returncode == 0, result.stderr
    for package in trainenv.pins():
        assert any(package in ln and "up to date" in ln for ln in result.stderr.splitlines()), result.stderr
    # installed with its bytecode (the venv's uv, --compile-bytecode): where PYTHONDONTWRITEBYTECODE is set, a
    # process would otherwise compile what it imports again (`import torch`: 3.3 CPU-s, not 2.1)
    torch_dir = Path(importlib.util.find_spec("torch").origin).parent
    assert list((torch_dir / "__pycache__").glob("__init__.cpython-*.pyc")), torch_dir


@pytest.mark.torch
@pytest.mark.slow
def test_gpu_mode_without_a_gpu_is_one_clear_line(torch_ready):
    if smoke.probe_torch(sys.executable)["gpus"]:
        pytest.skip("this machine has a GPU")
    result = run_cli("smoke", "train", "--gpu")
    assert_one_line_error(result, "--gpu: no CUDA GPU is visible")


@pytest.mark.torch
@pytest.mark.slow
@pytest.mark.parametrize("rank", [0, 1])
def test_a_teardown_error_after_the_last_barrier_ends_only_rank_0(torch_ready, rank, monkeypatch, capsys):
    """examples/train_ddp.py's finish(): past the last barrier every rank trained every step and rank 0 saved
    the checkpoint, so a connection rank 0 closed as it exited fails no other rank (it logs a teardown event
    and ends as done: a restart could never find rank 0 again); on rank 0 the error stands."""
    spec = importlib.util.spec_from_file_location("train_ddp_finish", Path(__file__).resolve().parents[2] /
                                                  "examples" / "train_ddp.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def barrier():
        raise RuntimeError("[gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.244.0.5]:29500")

    monkeypatch.setattr(module.dist, "barrier", barrier)
    if rank == 0:
        with pytest.raises(RuntimeError, match="Connection closed by peer"):
            module.finish(0)
        return
    module.finish(rank)
    [event] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert event["event"] == "teardown" and event["rank"] == 1 and "Connection closed" in event["error"]
