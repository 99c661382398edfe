"""`trainstack convert`: Training Operator v1 jobs to TrainJobs on the golden runtimes.

The corpus (tests/testdata/convert_v1/) is written in the shapes of training-operator's v1 examples and of
the jobs teams write (GPU, volumes, run policy). Each conversion is checked field by field, every
input field must be carried over or reported, and the output must pass `trainstack validate
--policies` against the real CRD schemas and the rendered dev policies.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import ROOT
from support.cli import assert_one_line_error, run_cli

CORPUS = ROOT / "tests" / "testdata" / "convert_v1"


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("kind: PyTorchJob\nmetadata: [\n", ["bad.yaml line", "not valid YAML"]),
        ("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: prod}\n",
         ["bad.yaml: Deployment prod/web: not a Training Operator v1 job"]),
        ("apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: tf}\nspec: {}\n",
         ["bad.yaml: TFJob tf: cannot convert: TensorFlow has no runtime"]),
        ("apiVersion: kubeflow.org/v2\nkind: PyTorchJob\nmetadata: {name: p}\n", ["PyTorchJob p: apiVersion is"]),
        ("- a\n- b\n", ["bad.yaml: document 1 is not a mapping"]),
        ("apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: p}\nspec: {}\n",
         ["PyTorchJob p: spec.pytorchReplicaSpecs: missing"]),
        (("apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: p}\nspec:\n  pytorchReplicaSpecs:\n"
          "    Chief: {replicas: 1}\n"), ["spec.pytorchReplicaSpecs.Chief: PyTorchJob has no replica type Chief"]),
    ],
    ids=["not-yaml", "unknown-kind", "tfjob", "wrong-api", "not-mapping", "no-replicas", "unknown-role"],
)
def test_bad_input_is_one_line_naming_file_and_object(tmp_path: Path, text: str, fragments: list[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    good = CORPUS / "pytorch-simple.yaml"
    result = run_cli("convert", str(bad), str(good), timeout=60)
    assert_one_line_error(result, *fragments)
    assert result.stdout == ""  # nothing written, not even the good file's TrainJob


def test_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    result = run_cli("convert", str(tmp_path / "nope.yaml"), timeout=60)
    assert_one_line_error(result, "nope.yaml: no such file")
    assert result.returncode == 2
