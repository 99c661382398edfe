"""The real node's plan, without a cluster: placement patches, the mirror values, pools, images."""

from __future__ import annotations

import yaml

from trainstack import images, yamlio
from trainstack.cluster import addons
from trainstack.cluster import node as nodemod
from trainstack.e2e.providers import local as localprov

BESIDE_REAL_NODES = True  # KWOK clusters and local processes only (tests/e2e/conftest.py)


def test_mirror_values_point_every_image_at_the_clusters_registry(lock, tmp_path):
    values = yamlio.load(localprov.mirror_values(lock, tmp_path / "v.yaml").read_text())
    mirror = nodemod.MIRROR
    assert values["global"]["imageRegistry"] == mirror
    assert values["kubeflow-trainer"]["image"]["registry"] == mirror
    assert values["jobset"]["image"]["repository"] == f"{mirror}/{lock.image('jobset-controller').repository}"
    torch = values["images"]["torch"]
    assert f"{torch['registry']}/{torch['repository']}:{torch['tag']}" == images.reference("torch-cpu", lock)
    assert values["runtimes"]["defaults"]["output"]["storageClassName"] == addons.STORAGE_CLASS


def test_node_prereqs_check_names_a_package_not_at_its_pinned_version(tmp_path, lock):
    from support.cli import run_cli

    assert run_cli("node", "prereqs", "--check").returncode == 0, "make setup installs the pinned packages"
    data = yamlio.load(lock.path.read_text())
    data["debian"]["runc"] = "0.0.1-not-this-one"
    broken = tmp_path / "lock.yaml"
    broken.write_text(yaml.safe_dump(data))
    result = run_cli("node", "prereqs", "--check", "--output", "json", env={"TRAINSTACK_LOCK": str(broken)})
    assert result.returncode == 1
    import json

    assert json.loads(result.stdout)["missing"] == {"runc": "0.0.1-not-this-one"}
