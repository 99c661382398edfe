"""`trainstack render`: deterministic output, clear errors, nothing of the user's overwritten."""

from __future__ import annotations

import shutil

import pytest
import yaml

from conftest import ROOT, docs_of
from support.cli import assert_one_line_error, run_cli
from trainstack import yamlio

pytestmark = pytest.mark.slow


def test_render_twice_is_byte_identical(dev_render):
    again = run_cli("render", "--env", "dev")
    assert again.returncode == 0, again.stderr
    assert again.stdout == dev_render


def test_render_is_sorted_crds_first(dev_render):
    kinds = [d["kind"] for d in docs_of(dev_render)]
    assert kinds[0] == "Namespace"
    last_crd = max(i for i, k in enumerate(kinds) if k == "CustomResourceDefinition")
    first_deployment = kinds.index("Deployment")
    assert last_crd < first_deployment


def test_render_to_folder_writes_one_file_per_object(dev_render, tmp_path):
    out = tmp_path / "out"
    result = run_cli("render", "--env", "dev", "--out-dir", str(out))
    assert result.returncode == 0, result.stderr
    files = [p for p in out.rglob("*.yaml")]
    assert len(files) == len(docs_of(dev_render))
    assert (out / "_cluster" / "CustomResourceDefinition-trainjobs.trainer.kubeflow.org.yaml").is_file()
    # rendering again replaces its own folder
    assert run_cli("render", "--env", "dev", "--out-dir", str(out)).returncode == 0


def test_render_refuses_to_overwrite_a_users_folder(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("precious")
    result = run_cli("render", "--env", "dev", "--out-dir", str(out))
    assert_one_line_error(result, "not empty")
    assert result.returncode == 2
    assert (out / "notes.txt").read_text() == "precious"


def test_dev_environment_label(dev_render):
    for doc in docs_of(dev_render):
        assert doc["metadata"]["labels"]["trainstack.io/environment"] == "dev", doc["metadata"]["name"]


def test_an_environments_own_values_win_over_the_shared_file(chart_ready, tmp_path):
    """The real staging overlay in a copy of the checkout, its own values.yaml setting one value the
    shared file sets too: the render (kustomize, helm) takes the environment's."""
    root = tmp_path / "checkout"
    root.mkdir()
    shutil.copy(ROOT / "trainstack.lock.yaml", root / "trainstack.lock.yaml")
    (root / "charts").symlink_to(ROOT / "charts")
    shutil.copytree(ROOT / "overlays", root / "overlays", ignore=shutil.ignore_patterns("argocd"))
    own = root / "overlays" / "staging" / "values.yaml"
    values = yamlio.load(own.read_text())
    values["kubeflow-trainer"]["manager"]["replicas"] = 3
    own.write_text(yaml.safe_dump(values))
    assert yamlio.load((root / "overlays" / "shared" / "production.yaml").read_text())[
        "kubeflow-trainer"]["manager"]["replicas"] == 2
    result = run_cli("render", "--env", "staging", env={"TRAINSTACK_ROOT": str(root)})
    assert result.returncode == 0, result.stderr
    replicas = {d["metadata"]["name"]: d["spec"]["replicas"] for d in docs_of(result.stdout) if d["kind"] == "Deployment"}
    assert replicas == {"kubeflow-trainer-controller-manager": 3, "jobset-controller": 2, "trainstack-tracking": 1}
