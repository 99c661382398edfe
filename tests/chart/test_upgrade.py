"""The parts of the upgrade test that need no cluster: exporting the old tree, CRDs a chart ships,
what counts as a loss, the webhook gap and helm's conflict lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainstack import release
from trainstack import render as rendermod
from trainstack.e2e import oldrelease


@pytest.mark.slow
def test_release_0_1_0_builds_with_its_own_tooling(tmp_path: Path, chart_ready) -> None:
    """The N-1 of the upgrade test: release 0.1.0's tree, its own `trainstack deps`, the CRDs both charts ship."""
    from conftest import ROOT

    commit, label = oldrelease.export_ref(ROOT, "0.1.0", tmp_path / "old")
    assert label == "release 0.1.0" and commit == release.load(ROOT / "releases.yaml")[-1].commit
    old_chart = oldrelease.build_old_chart(tmp_path / "old")
    old = {d["metadata"]["name"] for d in rendermod.crd_documents(old_chart)}
    new = {d["metadata"]["name"] for d in rendermod.crd_documents(ROOT / "charts" / "trainstack")}
    assert {"trainjobs.trainer.kubeflow.org", "jobsets.jobset.x-k8s.io"} <= old
    assert old <= new, f"CRDs the new chart no longer ships (their objects would be orphaned): {old - new}"


@pytest.mark.slow
def test_rendered_crds_are_those_helm_installs(chart_ready) -> None:
    """What the upgrade applies server-side: the chart's CRDs plus those of enabled dependencies only."""
    from conftest import ROOT

    chart = ROOT / "charts" / "trainstack"
    values = ["-f", str(ROOT / "overlays" / "dev" / "values.yaml")]
    names = {d["metadata"]["name"] for d in rendermod.rendered_crds(chart, values)}
    assert {"trainjobs.trainer.kubeflow.org", "clustertrainingruntimes.trainer.kubeflow.org",
            "jobsets.jobset.x-k8s.io"} <= names
    assert "leaderworkersets.leaderworkerset.x-k8s.io" not in names  # the data cache is off in dev
    with_cache = {d["metadata"]["name"] for d in rendermod.rendered_crds(chart, [*values, "--set", "dataCache.enabled=true"])}
    assert with_cache - names == {"leaderworkersets.leaderworkerset.x-k8s.io"}
    assert names <= {d["metadata"]["name"] for d in rendermod.crd_documents(chart)}
