"""`validate --policies`: ValidatingAdmissionPolicies judged offline like the API server does.

The same cases run against a real kube-apiserver with the same policies in test_fidelity.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.policy_corpus import CASES, NS, POLICIES, SETUP, PolicyCase, run_policy_case
from trainstack.validate import command


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_policy_case(case: PolicyCase, tmp_path: Path):
    _code, verdict, messages, result = run_policy_case(case, tmp_path)
    assert verdict == case.expect, messages
    if case.fragment:
        assert any(case.fragment in m for m in messages), messages
        assert any("ValidatingAdmissionPolicy '" in m and "with binding '" in m for m in messages)
    assert "policy-config" not in {f["rule"] for f in result["findings"]}


def test_policies_are_off_by_default(tmp_path: Path):
    (tmp_path / "all.yaml").write_text(SETUP + "---\n" + POLICIES + "---\n" + CASES[1].text)
    code, out = command.run([str(tmp_path), "-o", "json"])
    assert code == 0, out
    assert not [f for f in json.loads(out)["findings"] if f["rule"] == "policy"]


def test_missing_params_with_deny_action_rejects(tmp_path: Path):
    setup = SETUP.replace("  name: limits\n", "  name: other-limits\n")
    (tmp_path / "00.yaml").write_text(setup + "---\n" + POLICIES)
    (tmp_path / "10.yaml").write_text(CASES[0].text)
    code, out = command.run([str(tmp_path), "--policies", "-o", "json"])
    messages = [f["message"] for f in json.loads(out)["findings"] if f["name"] == "good"]
    assert code == 1
    assert any("no params found" in m and "Deny" in m for m in messages), messages


def test_policy_with_a_syntax_error_is_reported_on_the_policy(tmp_path: Path):
    broken = POLICIES.replace("variables.keys <= int(params.data.max)", "variables.keys <= int(params.data.max")
    (tmp_path / "00.yaml").write_text(SETUP + "---\n" + broken)
    code, out = command.run([str(tmp_path), "--policies", "-o", "json"])
    config = [f for f in json.loads(out)["findings"] if f["rule"] == "policy-config"]
    assert code == 1
    assert config and config[0]["kind"] == "ValidatingAdmissionPolicy" and config[0]["name"] == "test-max-keys"
    assert config[0]["path"] == "/spec/validations/0/expression"


def test_namespace_selector_uses_the_namespace_labels(tmp_path: Path):
    other = CASES[1].text.replace(f"namespace: {NS}", "namespace: elsewhere")
    (tmp_path / "00.yaml").write_text(SETUP + "---\n" + POLICIES)
    (tmp_path / "10.yaml").write_text(other)
    _code, out = command.run([str(tmp_path), "--policies", "-o", "json"])
    assert not [f for f in json.loads(out)["findings"] if f["name"] == "noteam" and f["rule"] == "policy"]


def test_a_policy_finding_names_the_line_of_the_field_it_judges(tmp_path: Path):
    (tmp_path / "00.yaml").write_text(SETUP + "---\n" + POLICIES)
    (tmp_path / "10.yaml").write_text(
        f"# too many keys and no team label\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: wide\n"
        f"  namespace: {NS}\n  labels:\n    app: x\ndata:\n  a: '1'\n  b: '2'\n  c: '3'\n  d: '4'\n")
    code, out = command.run([str(tmp_path), "--policies", "-o", "json"])
    assert code == 1
    found = {f["message"].split("'")[1]: (f["line"], f["path"]) for f in json.loads(out)["findings"]
             if f["name"] == "wide" and f["rule"] == "policy"}
    # the team label policy reads object.metadata.labels (line 7); max-keys its variable, object.data (line 9)
    assert found == {"test-team-label": (7, "/metadata/labels"), "test-max-keys": (9, "/data")}
