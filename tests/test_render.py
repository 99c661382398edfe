"""`trainstack render`: deterministic output, clear errors, nothing of the user's overwritten."""

from __future__ import annotations

import pytest

from conftest import assert_one_line_error, docs_of, run_cli

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
    result = run_cli("render", "--env", "dev", "-o", str(out))
    assert result.returncode == 0, result.stderr
    files = [p for p in out.rglob("*.yaml")]
    assert len(files) == len(docs_of(dev_render))
    assert (out / "_cluster" / "CustomResourceDefinition-trainjobs.trainer.kubeflow.org.yaml").is_file()
    # rendering again replaces its own folder
    assert run_cli("render", "--env", "dev", "-o", str(out)).returncode == 0


def test_render_refuses_to_overwrite_a_users_folder(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("precious")
    result = run_cli("render", "--env", "dev", "-o", str(out))
    assert_one_line_error(result, "not empty")
    assert result.returncode == 2
    assert (out / "notes.txt").read_text() == "precious"


def test_unknown_env_is_one_clear_line():
    result = run_cli("render", "--env", "nope")
    assert_one_line_error(result, "unknown environment 'nope'", "dev")
    assert result.returncode == 2


def test_dev_environment_label(dev_render):
    for doc in docs_of(dev_render):
        assert doc["metadata"]["labels"]["trainstack.io/environment"] == "dev", doc["metadata"]["name"]
