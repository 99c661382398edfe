"""values.schema.json is generated from values.yaml and rejects what users rely on it rejecting."""

from __future__ import annotations

import pytest

from conftest import helm_template


@pytest.mark.slow
@pytest.mark.parametrize("binary", ["helm", "helm3"])
def test_helm_rejects_what_the_schema_promises_and_names_each_key(chart_ready, binary):
    """One render with several bad values: the pinned helm (v4 and v3) refuses it and names each key."""
    result = helm_template(
        "--set", "kubeflow-trainer.jobset.install=true",           # const: upstream's nested JobSet stays off
        "--set", "runtimes.defaults.output.mountPath=workspace",  # pattern: an absolute path
        "--set", "runtimes.torchGpu.gpusPerNodes=2",               # unknown key in a runtime (shared definition)
        "--set", "policies.rules.imageTag.validationActions={Block}",  # enum of the shared actions
        "--set", "images.torch.tag=latest",                       # never :latest
        "--set", "global.imageRegistry=Mirror Host",              # registry host pattern
        "--set", "teams.ml.quotas.cpu=1",                         # unknown field of a team
        binary=binary, check=False)
    assert result.returncode != 0
    for key in ("kubeflow-trainer/jobset/install", "runtimes/defaults/output/mountPath", "gpusPerNodes",
                "policies/rules/imageTag/validationActions", "images/torch/tag", "global/imageRegistry", "quotas"):
        assert key in result.stderr, (key, result.stderr)
