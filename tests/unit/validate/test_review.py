"""The field review (validate/review.py): a field no ruling covers is reported, so an upstream
bump that adds one fails until someone rules on it; rulings name real rules."""

from __future__ import annotations

import copy

from conftest import ROOT
from trainstack.validate import review


def _crd(spec_properties: dict) -> dict:
    return {"spec": {"names": {"kind": "TrainingRuntime"}, "versions": [{"name": "v1alpha1", "storage": True, "schema": {
        "openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "properties": spec_properties}}}}}]}}


POD = {"type": "object", "properties": {
    "nodeName": {"type": "string"},
    "tolerations": {"type": "array", "items": {"type": "object", "properties": {"key": {"type": "string"}}}}}}
SPEC = {"template": {"type": "object", "properties": {"spec": {"type": "object", "properties": {"replicatedJobs": {
    "type": "array", "items": {"type": "object", "properties": {"template": {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {"template": {"type": "object", "properties": {"spec": POD}}}}}}}}}}}}}}
REVIEW = {
    "TrainingRuntime:spec.template": {"rule": "none"},
    "TrainingRuntime:spec.template.spec": {"rule": "none"},
    "TrainingRuntime:spec.template.spec.replicatedJobs": {"rule": "jobSize"},
    "TrainingRuntime replicatedJob:template": {"rule": "none"},
    "TrainingRuntime replicatedJob:template.spec": {"rule": "none"},
    "TrainingRuntime job:template": {"rule": "none"},
    "TrainingRuntime job:template.spec": {"rule": "none"},
    "TrainingRuntime pod:nodeName": {"rule": "placement", "subtree": True},
    "TrainingRuntime pod:tolerations": {"rule": "placement", "subtree": True},
}


def test_pod_fields_are_named_by_scope_and_subtrees_cover_their_fields():
    fields = review.fields_of(_crd(SPEC))
    assert "TrainingRuntime pod:tolerations[].key" in fields
    assert review.covering("TrainingRuntime pod:tolerations[].key", REVIEW) == "TrainingRuntime pod:tolerations"
    assert review.unreviewed(fields, REVIEW) == []


def test_a_new_upstream_field_is_unreviewed_until_ruled_on():
    spec = copy.deepcopy(SPEC)
    pod = spec["template"]["properties"]["spec"]["properties"]["replicatedJobs"]["items"]["properties"]["template"][
        "properties"]["spec"]["properties"]["template"]["properties"]["spec"]
    pod["properties"]["hostMagic"] = {"type": "object", "properties": {"enabled": {"type": "boolean"}}}
    fields = review.fields_of(_crd(spec))
    assert review.unreviewed(fields, REVIEW) == ["TrainingRuntime pod:hostMagic", "TrainingRuntime pod:hostMagic.enabled"]
    ruled = {**REVIEW, "TrainingRuntime pod:hostMagic": {"rule": "restrictedSecurity", "subtree": True}}
    assert review.unreviewed(fields, ruled) == []
    assert review.stale(fields, {**ruled, "TrainingRuntime pod:gone": {"rule": "none"}}) == ["TrainingRuntime pod:gone"]


def test_every_ruling_names_a_rule_with_examples_or_who_else_enforces_it():
    rulings = review.load_review(ROOT)
    rules = review.rule_files(ROOT)
    for name, entry in rulings.items():
        assert entry["rule"] in rules or entry["rule"] in review.ENFORCERS, name
        assert str(entry.get("why", "")).strip(), name
    for rule, file in rules.items():
        assert (ROOT / "examples" / "policies" / file).exists(), rule
