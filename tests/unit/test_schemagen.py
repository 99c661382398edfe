"""values.schema.json is generated from values.yaml and rejects what users rely on it rejecting."""

from __future__ import annotations

import json
import shutil

import jsonschema
import pytest

from conftest import ROOT
from support.cli import assert_one_line_error, run_cli
from trainstack import schemagen, yamlio
from trainstack.errors import UserError

CHART = ROOT / "charts" / "trainstack"
VALUES = (CHART / "values.yaml").read_text()


def _line_of(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if needle in line)


def _chart_copy(tmp_path, values_text: str | None = None):
    """A repository with only the chart's generated-docs inputs and outputs (TRAINSTACK_ROOT)."""
    chart = tmp_path / "charts" / "trainstack"
    chart.mkdir(parents=True)
    for name in ("values.yaml", "README.header.md", "README.md", "values.schema.json"):
        shutil.copy(CHART / name, chart / name)
    if values_text is not None:
        (chart / "values.yaml").write_text(values_text)
    return chart


def test_committed_schema_is_the_generated_one_and_says_so():
    committed = json.loads((CHART / "values.schema.json").read_text())
    assert committed == schemagen.generate(VALUES, "charts/trainstack/values.yaml")
    assert "Generated from values.yaml" in committed["$comment"]


def test_chart_defaults_pass_the_schema():
    """(helm checks every environment's values against it in the render tests)"""
    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(yamlio.load(VALUES))


def test_stale_schema_fails_docs_check_naming_the_file(tmp_path):
    chart = _chart_copy(tmp_path)
    stale = json.loads((chart / "values.schema.json").read_text())
    del stale["properties"]["runtimes"]["additionalProperties"]  # a hand edit
    (chart / "values.schema.json").write_text(json.dumps(stale, indent=2) + "\n")
    result = run_cli("docs", "--check", env={"TRAINSTACK_ROOT": str(tmp_path)})
    assert result.returncode == 1
    assert result.stdout.strip().splitlines() == [f"stale: {chart / 'values.schema.json'} (run 'trainstack docs')"]
    assert run_cli("docs", env={"TRAINSTACK_ROOT": str(tmp_path)}).returncode == 0
    assert (chart / "values.schema.json").read_text() == (CHART / "values.schema.json").read_text()


def test_an_annotation_changes_the_generated_schema(tmp_path):
    """An added constraint reaches values.schema.json through `trainstack docs` (and --check sees it)."""
    text = VALUES.replace("    # -- Size of the per-job PVC.\n",
                          "    # -- Size of the per-job PVC.\n    # @schema {pattern: \"^[0-9]+[KMGT]i$\"}\n", 1)
    assert text != VALUES
    chart = _chart_copy(tmp_path, text)
    assert run_cli("docs", "--check", env={"TRAINSTACK_ROOT": str(tmp_path)}).returncode == 1
    assert run_cli("docs", env={"TRAINSTACK_ROOT": str(tmp_path)}).returncode == 0
    schema = json.loads((chart / "values.schema.json").read_text())
    size = schema["$defs"]["runtimeSettings"]["properties"]["output"]["properties"]["size"]
    assert size == {"type": "string", "pattern": "^[0-9]+[KMGT]i$"}
    assert not jsonschema.Draft202012Validator(schema).is_valid(
        {"runtimes": {"defaults": {"output": {"size": "10 gigs"}}}})


NUM_NODES = ("    # -- Default `mlPolicy.numNodes` (a TrainJob's `trainer.numNodes` overrides it).\n"
             "    # @schema {minimum: 1}\n")
BAD_ANNOTATIONS = {
    "not YAML": ("# @schema {minimum: 1", "numNodes: @schema annotation is not YAML or JSON"),
    "unknown keyword": ("# @schema {minimun: 1}", "numNodes: @schema annotation has an unknown keyword 'minimun'"),
    "not a schema": ("# @schema {minimum: one}", "numNodes: @schema annotation is not a valid JSON Schema at minimum"),
    "default breaks it": ("# @schema {minimum: 2}", "numNodes: the default 1 breaks its own schema"),
    "no such definition": ('# @schema {$ref: "#/$defs/nodes"}', "numNodes: `$ref` '#/$defs/nodes' names no definition"),
    "unknown directive": ("# @schema.opne", "numNodes: unknown annotation @schema.opne"),
}


@pytest.mark.parametrize("name", sorted(BAD_ANNOTATIONS))
def test_bad_annotation_is_one_line_naming_file_line_and_key(name):
    annotation, message = BAD_ANNOTATIONS[name]
    text = VALUES.replace(NUM_NODES, NUM_NODES.replace("# @schema {minimum: 1}", annotation), 1)
    assert text != VALUES
    line = _line_of(text, "numNodes: 1")
    with pytest.raises(UserError) as caught:
        schemagen.generate(text, "charts/trainstack/values.yaml")
    assert "\n" not in caught.value.one_line()
    at = line if "breaks" in message or "names no" in message else line - 1  # the key's line, else the annotation's
    assert caught.value.message.startswith(f"charts/trainstack/values.yaml:{at}: runtimes.defaults.{message}"), \
        caught.value.message


def test_annotation_away_from_its_key_and_a_null_without_type_are_refused():
    orphan = VALUES.replace("  # -- Turn on the LeaderWorkerSet-backed data cache",
                            "  # @schema {minimum: 1}\n\n  # -- Turn on the LeaderWorkerSet-backed data cache", 1)
    with pytest.raises(UserError, match=r"values.yaml:\d+: @schema annotation is not directly above a key"):
        schemagen.generate(orphan)
    untyped = VALUES.replace('      # @schema {oneOf: [{type: "null"}, {$ref: "#/$defs/intOrPercent"}]}\n', "", 1)
    with pytest.raises(UserError, match=r"kubeflow-trainer.manager.podDisruptionBudget.maxUnavailable: a null default"):
        schemagen.generate(untyped)
    ignored = VALUES.replace("  amd:\n    # -- Render the AMD GPU runtimes at all.\n",
                             "  amd:\n    # -- Render the AMD GPU runtimes at all.\n    # @schema {const: true}\n", 1)
    with pytest.raises(UserError, match=r"runtimes.amd.enabled: annotation ignored: `enabled` of "
                                        r"\$defs/runtimeSettings is described by runtimes.cpu.enabled"):
        schemagen.generate(ignored)


def test_a_block_scalar_is_one_string_value_whatever_its_text_looks_like():
    """A `key: |` string (Kueue's configuration) is the key's value: its lines that look like keys or
    comments are text, and the keys after it are read at their own places."""
    from trainstack import schemanotes

    text = ("a:\n  # -- The config.\n  config: |-\n    kind: X\n    # not a note\n\n    nested:\n      b: 1\n"
            "  # -- After it.\n  after: 2\nc: >\n  folded\nd: 3\n")
    parsed = schemanotes.parse(text)
    assert set(parsed.lines) == {("a",), ("a", "config"), ("a", "after"), ("c",), ("d",)}
    assert parsed.descriptions[("a", "config")] == "The config."
    assert parsed.descriptions[("a", "after")] == "After it."
    assert schemagen.generate(text)["properties"]["a"]["properties"]["config"]["type"] == "string"


def test_bad_annotation_through_the_cli_is_one_line(tmp_path):
    text = VALUES.replace(NUM_NODES, NUM_NODES.replace("{minimum: 1}", "{minimun: 1}"), 1)
    _chart_copy(tmp_path, text)
    result = run_cli("docs", "--check", env={"TRAINSTACK_ROOT": str(tmp_path)})
    assert_one_line_error(result, "values.yaml:", "runtimes.defaults.numNodes", "unknown keyword 'minimun'")


def test_open_sections_stay_open_and_owned_ones_closed():
    """Upstream charts validate their own values: an upstream key trainstack does not know passes;
    a key trainstack owns does not, in the section, a shared definition or a team entry."""
    validator = jsonschema.Draft202012Validator(json.loads((CHART / "values.schema.json").read_text()))
    assert validator.is_valid({"kubeflow-trainer": {"manager": {"nodeSelector": {"a": "b"}}, "webhook": {"x": 1}},
                               "jobset": {"controller": {"replicas": 2}}, "lws": {"enabled": False, "anything": {}},
                               "kueue": {"install": True, "managerConfig": {}},
                               "runtimes": {"defaults": {"podSecurityContext": {"fsGroupChangePolicy": "Always"},
                                                         "affinity": {"nodeAffinity": {}}}},
                               "teams": {"ml": {"quota": {"cpu": 4, "memory": "8Gi"}}}})
    for bad in ({"runtimes": {"cpu": {"gpusPerNodes": 1}}}, {"policies": {"rules": {"jobSize": {"enable": True}}}},
                {"teams": {"ml": {"quotas": {}}}}, {"monitoring": {"alerts": {"enabeld": True}}},
                {"kubeflow-trainer": {"manager": {"podDisruptionBudget": {"minAvailabe": 1}}}}):
        assert not validator.is_valid(bad), bad


def test_every_runtime_key_takes_every_runtime_setting():
    """Each runtime's key (runtimes/*.yaml `trainstack.io/values-key` and variants) is a `runtime`, so
    it accepts every key of `runtimes.defaults` and the accelerator classes (a new runtime's key
    without `# @schema.def runtime` would take only the keys of its own default)."""
    from trainstack import chartdocs

    schema = json.loads((CHART / "values.schema.json").read_text())
    keys = {entry["key"] for entry in chartdocs.runtime_catalog()}
    runtimes = schema["properties"]["runtimes"]["properties"]
    assert keys and {key for key in keys if runtimes[key].get("$ref") != "#/$defs/runtime"} == set()
    settings = set(schema["$defs"]["runtimeSettings"]["properties"])
    assert {"numNodes", "output", "resources", "gpusPerNode", "shm"} <= settings
    assert settings | {"name", "aliases", "image"} == set(schema["$defs"]["runtime"]["properties"])
