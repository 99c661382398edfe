"""Guard rails: what the chart ships per environment, and offline verdicts equal to the examples'."""

from __future__ import annotations

from conftest import ROOT
from trainstack import paths, yamlio

RULES = {"trainjobRuntime", "imageTag", "imageRegistry", "jobSize", "gpuRuntime", "requiredLabels", "restrictedSecurity",
         "webhookValidation", "teamAccess", "placement", "imageEnv"}


def test_every_policy_file_is_a_rule_in_values():

    found = {yamlio.load(p.read_text())["metadata"]["annotations"]["trainstack.io/rule"]
             for p in paths.policies_dir(ROOT).glob("*.yaml")}
    assert found == RULES
