"""The field review against the pinned CRDs: every field a tenant can set has a ruling, no ruling
names a field upstream dropped, and docs/guardrails.md shows the current table."""

from __future__ import annotations

import pytest

from conftest import ROOT
from trainstack.validate import review

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def fields(chart_ready):
    found = review.pinned_fields()
    assert any(f.startswith("TrainJob patch pod:") for f in found) and any(f.startswith("TrainingRuntime pod:") for f in found)
    return found


def test_every_field_of_the_pinned_crds_is_reviewed(fields):
    missing = review.unreviewed(fields, review.load_review(ROOT))
    assert missing == [], f"rule on these in {review.REVIEW_FILE}: {missing}"


def test_no_ruling_names_a_field_the_pinned_crds_lack(fields):
    assert review.stale(fields, review.load_review(ROOT)) == []


def test_the_table_in_the_docs_is_generated_from_the_review(fields):
    doc = ROOT / review.DOC_FILE
    wanted = review.render_doc(doc.read_text(), review.table(review.load_review(ROOT), review.rule_files(ROOT), fields))
    assert doc.read_text() == wanted, "run make generate"
