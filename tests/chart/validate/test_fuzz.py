"""Random and mutated YAML/JSON never crash validate: exit 0, 1 or 2, and valid JSON with -o json."""

from __future__ import annotations

import json
import os
import string
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from support.cli import run_cli
from trainstack.validate import command

ROOT = Path(__file__).resolve().parents[3]
# CI runs the same examples every time (derandomize); `trainstack bench fuzz` sets TRAINSTACK_FUZZ_EXAMPLES
# for a longer, randomized run of the same strategies.
FUZZ_EXAMPLES = int(os.environ.get("TRAINSTACK_FUZZ_EXAMPLES") or 0)
DERANDOMIZE = not FUZZ_EXAMPLES


def examples(default: int) -> int:
    return FUZZ_EXAMPLES or default

# An Application whose JSON text holds unpaired UTF-16 surrogates, in a key and in a value.
SURROGATES = ('{"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",\n'
              ' "metadata": {"name": "app", "namespace": "default"},\n'
              ' "spec": {"project": "\\ud800x", "\\udc00": "y"}}')


KINDS = [("v1", "ConfigMap"), ("v1", "Service"), ("apps/v1", "Deployment"), ("batch/v1", "Job"),
         ("trainer.kubeflow.org/v1alpha1", "TrainJob"), ("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime"),
         ("jobset.x-k8s.io/v1alpha2", "JobSet"), ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"),
         ("argoproj.io/v1alpha1", "Application"), ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"),
         ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"),
         ("apiextensions.k8s.io/v1", "CustomResourceDefinition"), ("example.com/v1", "Widget"), ("v1", "List")]
FIELDS = ["metadata", "spec", "data", "name", "labels", "annotations", "containers", "image", "replicas",
          "template", "runtimeRef", "trainer", "numNodes", "mlPolicy", "torch", "validations", "expression",
          "matchConstraints", "resourceRules", "paramRef", "items", "versions", "schema", "openAPIV3Schema",
          "x-kubernetes-validations", "rule", "type", "properties", "generateName", "namespace", "finalizers"]

scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20)
           | st.sampled_from(["y", "no", "12:30", "0644", "1Gi", "500m", "has(self.x)", "self.size() > 1", "*",
                              "CREATE", "Deny", "Warn", "", "~", "-", "a/b", "Bad_Name"]))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=8), inner, max_size=5),
                      max_leaves=25)


@st.composite
def objects(draw) -> dict:
    api_version, kind = draw(st.sampled_from(KINDS))
    obj = {"apiVersion": api_version, "kind": kind}
    obj.update(draw(st.dictionaries(st.sampled_from(FIELDS), values, max_size=4)))
    if draw(st.booleans()):
        obj["metadata"] = {"name": draw(st.text(string.ascii_lowercase + "-.", min_size=1, max_size=12)),
                           "namespace": "default", **draw(st.dictionaries(st.sampled_from(FIELDS), values, max_size=2))}
    return obj


@st.composite
def texts(draw) -> str:
    docs = draw(st.lists(objects() | values, min_size=1, max_size=4))
    style = draw(st.sampled_from(["yaml", "json", "flow"]))
    if style == "json":
        text = json.dumps(docs[0])
    else:
        text = "".join("---\n" + yaml.safe_dump(d, default_flow_style=(style == "flow"), allow_unicode=True)
                       for d in docs)
    for _ in range(draw(st.integers(0, 3))):  # mutate: insert, delete or replace a slice
        if not text:
            break
        at = draw(st.integers(0, len(text) - 1))
        end = min(len(text), at + draw(st.integers(0, 6)))
        text = text[:at] + draw(st.sampled_from(["", ":", "- ", "\n", "  ", "{", "]", "&a ", "*a", "!!int ", "---\n",
                                                 "\t", "'", '"', "<<: ", "#", "? ", "%"])) + text[end:]
    return text


def _check(code: int, out: str) -> dict:
    assert code in (0, 1, 2)
    result = json.loads(out)
    summary = result["summary"]
    assert summary["errors"] == sum(1 for f in result["findings"] if f["severity"] == "error")
    assert summary["warnings"] == sum(1 for f in result["findings"] if f["severity"] == "warning")
    assert (code == 1) == (summary["errors"] > 0) or code == 2
    assert "internal-error" not in {f["rule"] for f in result["findings"]}, result["findings"]
    return result


@settings(max_examples=examples(250), derandomize=DERANDOMIZE, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(text=texts(), flags=st.lists(st.sampled_from(["--strict", "--policies"]), unique=True))
@example(text=SURROGATES, flags=["--policies"])
def test_mutated_manifests_never_crash(text: str, flags: list[str]):
    _check(*command.run(["-", "--output", "json", *flags], stdin_text=text))


@settings(max_examples=examples(150), derandomize=DERANDOMIZE, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(max_size=300))
def test_random_text_never_crashes(text: str):
    _check(*command.run(["-", "--output", "json"], stdin_text=text))


@settings(max_examples=examples(60), derandomize=DERANDOMIZE, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=200), name=st.sampled_from(["x.yaml", "x.json", "x.yml"]))
def test_random_bytes_in_files_never_crash(tmp_path_factory, data: bytes, name: str):
    path = tmp_path_factory.mktemp("fuzz") / name
    path.write_bytes(data)
    _check(*command.run([str(path), "--output", "json"]))


def test_a_few_random_inputs_through_the_real_cli(tmp_path: Path):
    samples = ["a: [1,\n", "\x00\x01", "---\n- 1\n- 2\n", '{"kind": 1}', "kind: ConfigMap\napiVersion: v1\n",
               "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: 1}\n"]
    for i, text in enumerate(samples):
        result = run_cli("validate", "-", "--output", "json", input_text=text, timeout=120)
        _check(result.returncode, result.stdout)
        assert "Traceback" not in result.stderr
        (tmp_path / f"f{i}.yaml").write_text(text)
    result = run_cli("validate", str(tmp_path), "--output", "json", timeout=120)
    data = _check(result.returncode, result.stdout)
    assert result.returncode == 1 and data["summary"]["documents"] >= 5


def _surrogate_finding(result: dict, path: str, line: int) -> None:
    """The one clear finding of a lone surrogate: invalid-text, with its file, line and field."""
    assert [(f["rule"], f["severity"], f["file"], f["line"], f["path"]) for f in result["findings"]] == [
        ("invalid-text", "error", "-", line, path)]


def test_lone_surrogates_in_json_are_one_clear_finding():
    for flags in ([], ["--strict", "--policies"]):
        code, out = command.run(["-", "--output", "json", *flags], stdin_text=SURROGATES)
        result = _check(code, out)
        _surrogate_finding(result, "/spec/project", 3)
        assert "unpaired UTF-16 surrogate U+D800" in result["findings"][0]["message"]
    value_only = SURROGATES.replace('"\\udc00"', '"other"')
    key_only = SURROGATES.replace('"\\ud800x"', '"default"')
    # in a value alone: the API server stores U+FFFD and accepts it, a warning (and the rest is validated)
    findings = _check(*command.run(["-", "-o", "json"], stdin_text=value_only))["findings"]
    assert [(f["severity"], f["line"], f["path"]) for f in findings if f["rule"] == "invalid-text"] == [
        ("warning", 3, "/spec/project")]
    # a key is named as the \\uXXXX escape it was written as, so every output can carry it
    _surrogate_finding(_check(*command.run(["-", "-o", "json"], stdin_text=key_only)), "/spec/\\udc00", 3)
    paired = SURROGATES.replace('"\\ud800x"', '"\\ud83d\\ude00"').replace('"\\udc00"', '"other"')
    assert "invalid-text" not in command.run(["-", "-o", "json"], stdin_text=paired)[1]


def test_a_lone_surrogate_in_free_text_warns_and_in_a_formatted_field_fails():
    job = ('{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",\n'
           ' "metadata": {"name": "job", "namespace": "team-a"},\n'
           ' "spec": {"runtimeRef": {"name": "torch-distributed"},\n'
           '  "trainer": {"env": [{"name": "GREETING", "value": "hi \\ud800"}]}}}\n')
    code, out = command.run(["-", "-o", "json"], stdin_text=job)
    assert code == 0 and [(f["rule"], f["severity"], f["path"]) for f in _check(code, out)["findings"]] == [
        ("invalid-text", "warning", "/spec/trainer/env/0/value")]
    # a name must be a DNS label: with U+FFFD stored it is not, an error as the API server gives
    code, out = command.run(["-", "-o", "json"], stdin_text=job.replace('"job"', '"job\\ud800"'))
    findings = _check(code, out)["findings"]
    assert code == 1 and ("invalid-text", "warning") in [(f["rule"], f["severity"]) for f in findings]
    assert any(f["severity"] == "error" and f["path"] == "/metadata/name" for f in findings), findings


def test_a_lone_surrogate_in_yaml_text_names_its_line_and_field():
    text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n  key: \"a\ud800\"\n"
    _surrogate_finding(_check(*command.run(["-", "-o", "json"], stdin_text=text)), "/data/key", 6)


def test_lone_surrogates_through_the_real_cli_keep_every_output_valid():
    for fmt in ("json", "sarif", "junit", "text"):
        result = run_cli("validate", "-", "--output", fmt, input_text=SURROGATES)
        assert result.returncode == 1 and "Traceback" not in result.stderr and "validate failed" not in result.stdout
        if fmt == "json":
            _surrogate_finding(_check(result.returncode, result.stdout), "/spec/project", 3)
        elif fmt == "sarif":
            results = json.loads(result.stdout)["runs"][0]["results"]
            assert [r["ruleId"] for r in results] == ["invalid-text"]
        elif fmt == "junit":
            assert ET.fromstring(result.stdout).find(".//failure").get("type") == "invalid-text"
        else:
            assert result.stdout.startswith("-:3: error:") and "[invalid-text]" in result.stdout
    # bytes that are not UTF-8 on stdin (read with surrogateescape) get the same finding, on their line
    raw = subprocess.run([sys.executable, "-m", "trainstack", "validate", "-", "-o", "json"], capture_output=True,
                         cwd=ROOT, input=b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: \"a\xed\xa0\x80\"}\n",
                         timeout=120, check=False)
    data = _check(raw.returncode, raw.stdout.decode())
    _surrogate_finding(data, "/metadata/name", 3)
    assert "byte 0xED" in data["findings"][0]["message"]
