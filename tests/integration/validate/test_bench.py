"""`trainstack bench validate` end to end on a small corpus: the results' shape and the peers' agreement."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from support.cli import run_cli

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def record(tmp_path_factory) -> dict:
    sys.path.insert(0, str(ROOT / "scripts"))
    from trainstack import tools

    if tools.find("kubectl-validate") is None:
        pytest.skip("kubectl-validate is the bench tier's (make setup-bench, about 5 min cold): not built here")
    out = tmp_path_factory.mktemp("bench-validate")
    done = run_cli("bench", "validate", "--docs", "400", "--runs", "1", "--out-dir", str(out),
                   env={"TRAINSTACK_ROOT": str(ROOT)}, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads((out / "validate.json").read_text())


@pytest.mark.slow  # needs the built kubeconform and kubectl-validate
def test_every_tool_has_a_median_section_with_its_runs(record):
    assert record["documents"] == 400 and record["runs"] == 1 and record["statistic"] == "median"
    assert len(record["load_average"]) == 3
    for tool in ("trainstack", "kubeconform", "kubectl_validate"):
        section = record[tool]
        assert section["docs_per_s"] > 0 and section["peak_rss_mb"] > 1 and section["peak_pss_mb"] > 1
        assert len(section["runs"]) == 1 and len(section["runs"][0]["load_before"]) == 3
        assert section["runs"][0]["exit_code"] == 1  # the corpus has invalid documents
        assert section["version" if tool != "trainstack" else "cel"]
    # the keys older readers use stay, and agree with the sections
    assert record["trainstack_docs_per_s"] == record["trainstack"]["docs_per_s"]
    assert record["ratio"] == record["ratios"]["kubeconform"]
    expected = record["trainstack_docs_per_s"] / record["kubectl_validate_docs_per_s"]
    assert record["ratios"]["kubectl_validate"] == pytest.approx(expected, rel=0.01)
    from trainstack import lock as lockmod

    assert record["kubectl_validate"]["version"] == lockmod.load().tool("kubectl-validate").version


@pytest.mark.slow
def test_the_three_validators_agree_where_their_coverage_overlaps(record):
    agreement = record["agreement"]
    broken = agreement["broken_on_purpose"]
    assert broken == record["corpus"]["broken_on_purpose"] == 400 // 20
    for tool in ("trainstack", "kubeconform", "kubectl_validate"):
        caught = agreement[tool]["caught"]
        # every tool sees a label of the wrong type and (strict) an unknown field
        assert agreement[tool]["missed"]["label-type"] == 0, tool
        assert agreement[tool]["missed"]["unknown-field"] == 0, tool
        assert agreement[tool]["flagged_not_broken"] == 0, tool
        assert sum(caught.values()) == agreement[tool]["invalid_documents"], tool
    # trainstack and the API server's code also check CEL rules and metadata names: they catch all
    assert sum(agreement["trainstack"]["missed"].values()) == 0
    assert sum(agreement["kubectl_validate"]["missed"].values()) == 0
    # kubeconform checks JSON Schema only: it cannot see a CRD's CEL rules
    assert agreement["kubeconform"]["missed"]["cel-rule"] == agreement["trainstack"]["caught"]["cel-rule"]
