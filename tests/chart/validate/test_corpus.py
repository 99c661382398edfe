"""Every corpus case gets the verdict, rule, field and message it should (fast: no API server).

The same cases are proven against a real kube-apiserver in test_fidelity.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.corpus import CASES, Case, inputs
from trainstack.validate import command

FIELDS = {"file", "line", "document", "apiVersion", "kind", "namespace", "name", "rule", "severity", "message", "path"}


def _run(case: Case, tmp_path: Path, *extra: str) -> tuple[int, dict, Path]:
    path, args = inputs(case, tmp_path)
    code, out = command.run([*args, "--output", "json", *extra])
    return code, json.loads(out), path


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case_verdict_rule_and_message(case: Case, tmp_path: Path):
    code, result, path = _run(case, tmp_path, "--strict")
    errors = [f for f in result["findings"] if f["severity"] == "error"]
    assert set(result["summary"]) == {"documents", "errors", "warnings"}
    assert result["summary"]["errors"] == len(errors)
    assert result["summary"]["documents"] == (2 if case.crd else 1)
    for finding in result["findings"]:
        assert set(finding) == FIELDS
        assert finding["file"] == str(path)
        assert finding["line"] >= 1
    if case.expect == "accept":
        assert code == 0, errors
        assert not errors
        return
    assert code == 1
    assert errors, "a rejected case needs at least one error"
    matching = [f for f in errors if f["rule"] == case.rule and (not case.path or f["path"] == case.path)]
    assert matching, f"expected rule {case.rule} at {case.path!r}, got {[(f['rule'], f['path']) for f in errors]}"
    finding = matching[0]
    if case.rule not in ("yaml-syntax", "type-meta"):
        # the object and, where one is named, the field
        data_kind = finding["kind"]
        assert data_kind, finding
        if case.path:
            leaf = case.path.rsplit("/", 1)[-1].replace("~1", "/")
            assert leaf in finding["message"], finding


@pytest.mark.parametrize("case", [c for c in CASES if c.expect == "reject"][:12], ids=lambda c: c.id)
def test_text_output_names_file_object_and_field(case: Case, tmp_path: Path):
    path, args = inputs(case, tmp_path)
    code, out = command.run([*args, "--strict"])
    assert code == 1
    first = out.splitlines()[0]
    assert first.startswith(f"{path}:"), first
    assert ": error: " in first
    assert f"[{case.rule}]" in out
    name = next((ln.split("name: ", 1)[1].strip() for ln in case.text.splitlines() if ln.startswith("  name: ")), "")
    if name and case.rule not in ("yaml-syntax",):
        assert name in out, out


def test_unknown_kind_is_a_warning_unless_strict(tmp_path: Path):
    path = tmp_path / "widget.yaml"
    path.write_text("apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n")
    code, out = command.run([str(path), "-o", "json"])
    result = json.loads(out)
    assert code == 0
    assert result["summary"] == {"documents": 1, "errors": 0, "warnings": 1}
    assert result["findings"][0]["rule"] == "unknown-kind"
    assert "Widget" in result["findings"][0]["message"]
    code, out = command.run([str(path), "-o", "json", "--strict"])
    assert code == 1
    assert json.loads(out)["findings"][0]["severity"] == "error"


def test_removed_api_version_names_the_served_one(tmp_path: Path):
    path = tmp_path / "old.yaml"
    path.write_text("apiVersion: extensions/v1beta1\nkind: Deployment\nmetadata:\n  name: old\n")
    code, out = command.run([str(path), "--strict"])
    assert code == 1
    assert "served as apps/v1" in out


def test_yaml_duplicate_keys_are_errors_with_both_lines(tmp_path: Path):
    path = tmp_path / "dup.yaml"
    path.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: dup\ndata:\n  a: '1'\n  b: '2'\n  a: '3'\n")
    code, out = command.run([str(path), "-o", "json"])
    result = json.loads(out)
    assert code == 1
    [finding] = result["findings"]
    assert finding["rule"] == "duplicate-key"
    assert finding["path"] == "/data/a"
    assert finding["line"] == 8
    assert "first at line 6" in finding["message"]


def test_crd_among_the_inputs_defines_its_kind(tmp_path: Path):
    crd = """apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              required: [size]
              properties:
                size: {type: integer, minimum: 1}
              x-kubernetes-validations:
                - rule: self.size <= 10
                  message: size must be at most 10
"""
    widgets = ("apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: ok\nspec:\n  size: 3\n---\n"
               "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: big\nspec:\n  size: 11\n---\n"
               "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: bad\nspec:\n  size: 0\n  color: red\n")
    (tmp_path / "a-widgets.yaml").write_text(widgets)
    (tmp_path / "b-crd.yaml").write_text(crd)
    code, out = command.run([str(tmp_path), "-o", "json", "--strict"])
    result = json.loads(out)
    assert code == 1
    by_name = {}
    for finding in result["findings"]:
        by_name.setdefault(finding["name"], []).append(finding)
    assert "ok" not in by_name
    assert [f["rule"] for f in by_name["big"]] == ["cel"]
    assert "size must be at most 10" in by_name["big"][0]["message"]
    assert {f["rule"] for f in by_name["bad"]} == {"schema", "unknown-field"}
    assert result["summary"]["documents"] == 4


def test_cel_message_expression_and_defaults(tmp_path: Path):
    """messageExpression is evaluated over the defaulted object (mode defaults to slow)."""
    from support.corpus import by_id

    code, result, _ = _run(by_id("gadget-cel-message-expression-field-path"), tmp_path)
    [finding] = [f for f in result["findings"] if f["rule"] == "cel"]
    assert code == 1
    assert "size exceeds maxSize in slow mode" in finding["message"]
    assert finding["path"] == "/spec/size" and finding["line"] == 7
