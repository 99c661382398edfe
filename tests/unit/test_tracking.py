"""Experiment tracking without a cluster: the images carry MLflow (the server's and the client's pins from
one place in the lock), the e2e's values, and what the e2e's check calls a missing piece of a run."""

from __future__ import annotations

import pytest
import yaml

from trainstack import images
from trainstack.e2e import tracking
from trainstack.e2e.base import SMOKE_NS
from trainstack.e2e.providers import local as localprov

STEPS = 3
GOOD = {"runs": 1, "status": "FINISHED", "loss_steps": [1, 2, 3], "params": {"steps": "3", "world_size": "2"},
        "metrics": {"final_loss": 0.1, "loss": 0.1}, "artifacts": ["checkpoint/checkpoint.pt"],
        "other_reads_run": False, "other_sees": [tracking.OTHER_NS]}


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


@pytest.mark.parametrize("name", ["torch-cpu", "jax-cpu", "xgboost-cpu"])
def test_every_training_image_carries_the_client_in_its_one_install(lock, name):
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


def test_e2e_values_turn_tracking_on_for_both_namespaces_on_the_clusters_storage(lock, tmp_path):
    values = yaml.safe_load(localprov.mirror_values(lock, tmp_path / "v.yaml", tracking=True).read_text())
    assert values["tracking"]["enabled"] is True
    assert values["tracking"]["namespaces"] == [SMOKE_NS, tracking.OTHER_NS]
    assert values["tracking"]["storage"]["storageClassName"]
    assert "tracking" not in yaml.safe_load(localprov.mirror_values(lock, tmp_path / "w.yaml").read_text())


def test_a_kwok_only_cluster_never_runs_the_server(tmp_path):
    assert localprov.LocalProvider(tmp_path, nodes="kwok", tracking=True).tracking is False
    assert localprov.LocalProvider(tmp_path, nodes="real", tracking=True).tracking is True


def test_a_complete_run_has_no_problems():
    assert tracking.run_problems(GOOD, "job", STEPS) == []


@pytest.mark.parametrize(("change", "phrase"), [
    ({"runs": 0}, "0 runs named job"),
    ({"status": "FAILED"}, "status FAILED"),
    ({"loss_steps": [1, 3]}, "loss logged at 2 steps, not at each of 3"),
    ({"params": {"steps": "3"}}, "parameters"),
    ({"metrics": {"loss": 1.0}}, "no final_loss"),
    ({"artifacts": []}, "no checkpoint artifact"),
    ({"other_reads_run": True}, "reads the run"),
    ({"other_sees": [SMOKE_NS]}, f"lists experiment {SMOKE_NS}"),
])
def test_each_missing_piece_of_a_run_is_named(change, phrase):
    problems = tracking.run_problems({**GOOD, **change}, "job", STEPS)
    assert len(problems) == 1 and phrase in problems[0], problems
