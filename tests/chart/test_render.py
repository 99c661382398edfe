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


# The chart's one line for values it refuses, as helm fails it (guards.yaml), longer than 400 characters.
GANG_NATIVE = ("scheduling.gang=native: the cluster does not serve scheduling.k8s.io/v1alpha2/PodGroup; it needs "
               "Kubernetes 1.36 with the feature gates GenericWorkload")
GANG_NATIVE_END = "(docs/scheduling.md; offline: helm template --api-versions scheduling.k8s.io/v1alpha2/PodGroup)"


def _chart_message(stderr: str) -> str:
    line = stderr.strip().splitlines()[-1]
    assert "execution error" not in line and "templates/" not in line, line  # no helm wrapper, no template
    assert GANG_NATIVE in line and GANG_NATIVE_END in line, line  # whole, not cut mid-word
    return line


def test_a_chart_fail_reaches_render_whole_without_a_template(chart_ready, tmp_path):
    root = tmp_path / "root"  # a checkout whose dev overlay sets values the chart refuses
    root.mkdir()
    for name in ("charts", "releases.yaml", "trainstack.lock.yaml", "pyproject.toml"):
        (root / name).symlink_to(ROOT / name)
    shutil.copytree(ROOT / "overlays", root / "overlays", ignore=shutil.ignore_patterns("charts"))
    with (root / "overlays" / "dev" / "values.yaml").open("a") as handle:
        handle.write("\nscheduling:\n  gang: native\n")
    result = run_cli("render", "--env", "dev", env={"TRAINSTACK_ROOT": str(root)})
    assert_one_line_error(result, "overlays/dev")
    assert _chart_message(result.stderr).startswith(f"error: overlays/dev: {GANG_NATIVE}")


def test_a_chart_fail_reaches_team_add_whole_without_a_template(chart_ready, tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text("scheduling:\n  gang: native\n")
    result = run_cli("team", "add", "vision", "--values", str(values), "--members", "group:vision")
    assert_one_line_error(result, str(values))
    assert _chart_message(result.stderr).startswith(f"error: {values}: {GANG_NATIVE}")
    assert values.read_text() == "scheduling:\n  gang: native\n"
