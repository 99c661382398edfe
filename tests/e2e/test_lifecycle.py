"""Lifecycle without loss, live on local clusters (KWOK nodes, the chart's controllers as host
processes), one at a time. `make e2e-lifecycle` runs this module; `make test` collects it.

1. cluster A: upgrade from the last release with helm v4 (install N-1, TrainJobs finished and held,
   CRDs server-side, helm upgrade with a webhook probe, held jobs resume and end Complete, rollback
   to N-1); then the working tree again (helm v4 over the rolled-back release) and the faults with
   TrainJobs in flight; then a backup, A torn down, the backup restored into a fresh cluster;
2. cluster B: the same upgrade and rollback with helm v3, through `trainstack e2e --upgrade-from`.

Tests run in file order and share cluster A.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from trainstack import backup, paths, release, tools, yamlio
from trainstack import render as rendermod
from trainstack.cluster.local import BINARIES, LocalCluster
from trainstack.e2e import clusterstate, upgrade
from trainstack.e2e import suite as suitemod
from trainstack.e2e.faults import Faults
from trainstack.e2e.providers.local import LocalProvider

from .conftest import fresh_run_dir, need_binaries

BESIDE_REAL_NODES = True  # KWOK clusters and local processes only (tests/e2e/conftest.py)

pytestmark = pytest.mark.e2e
ROOT = paths.repo_root()
FIGURES = Path(os.environ.get("TRAINSTACK_LIFECYCLE_FIGURES", "")) if os.environ.get(
    "TRAINSTACK_LIFECYCLE_FIGURES") else None


def previous_release() -> str:
    return release.previous(ROOT)


class Lifecycle:
    def __init__(self, tag: str) -> None:
        need_binaries(*BINARIES, "helm", "helm3")
        self.run_dir = fresh_run_dir(f"lifecycle-{tag}")
        self.provider = LocalProvider(self.run_dir, nodes="kwok")
        self.suite = suitemod.Suite(self.provider, "dev", self.run_dir)
        for name, fn in self.suite.cluster_steps():  # nothing installed
            self.suite.step(name, fn)
        self.test = upgrade.for_suite(self.suite, previous_release(), self.run_dir)
        self.up = True
        self.figures: dict = {}

    def down(self) -> None:
        if self.up:
            self.up = False
            self.provider.down(keep=False)
            shutil.rmtree(self.run_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def lifecycle():
    # clusters of their own: upgrades, rollbacks, faults on the control plane, teardown and restore
    life = Lifecycle("a")
    try:
        yield life
    finally:
        life.down()
        if FIGURES is not None:
            FIGURES.write_text(json.dumps(life.figures, indent=2))


def check_upgrade(life: Lifecycle, binary: str) -> None:
    test = life.test
    try:
        test.run((binary,))
    finally:
        life.figures[f"upgrade-{binary}"] = upgrade.report(test)
    steps = {r.step: r for r in test.rows}
    assert all(r.result == "pass" for r in test.rows), steps
    assert f"{binary}: rollback to release {previous_release()}" in steps
    assert test.figures[f"{binary}_upgrade_seconds"] > 0
    assert test.figures[f"{binary}_webhook_gap_seconds"] < 30  # measured; a longer outage fails
    assert "CRDs applied server-side" in steps[f"{binary}: CRDs server-side, then upgrade to the working tree"].detail
    jobs = {t["metadata"]["name"]: clusterstate.terminal(t)[0]
            for t in test.kube.kubectl_json("get", "trainjobs", "-n", upgrade.JOBS_NS)["items"]}
    assert {f"done-{binary}-0", f"done-{binary}-1", f"running-{binary}-0", f"running-{binary}-1",
            f"after-rollback-{binary}-0"} <= set(jobs)
    assert all(state == "Complete" for state in jobs.values()), jobs


def test_upgrade_from_the_last_release_with_helm_v4_and_roll_back(lifecycle):
    check_upgrade(lifecycle, "helm")


def test_faults_with_trainjobs_in_flight_lose_nothing(lifecycle):
    test = lifecycle.test
    test.upgrade("helm")  # the working tree again, by helm v4 over the release helm v3 rolled back
    faults = Faults(test, lifecycle.provider)
    try:
        faults.all_kwok()
    finally:
        faults.table()
        lifecycle.figures["faults"] = [r.__dict__ for r in faults.rows]
    assert [r.fault for r in faults.rows] == ["Trainer controller killed", "both controllers killed",
                                             "webhooks unavailable", "API server restarted", "etcd restarted"]
    for row in faults.rows:
        assert row.lost == 0, row
        assert row.running > 0, row  # the fault hit TrainJobs in flight
    webhook = faults.rows[2]
    assert webhook.detail.startswith("rejected: ") and "nothing stored" in webhook.detail, webhook.detail


def test_backup_restores_into_a_fresh_cluster(lifecycle, tmp_path):
    test = lifecycle.test
    out = tmp_path / "backup"
    result = subprocess.run([sys.executable, "-m", "trainstack", "backup", "--out-dir", str(out), "--kubeconfig",
                             str(test.kubeconfig), "--output", "json"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["objects"]["TrainJob"] >= 10 and summary["objects"]["ClusterTrainingRuntime"] >= 3
    saved = [d for f in sorted(out.glob("*.yaml")) for d in yamlio.load_all(f.read_text()) if d]
    for doc in saved:
        assert "status" not in doc and not {"uid", "resourceVersion", "managedFields"} & set(doc["metadata"])
    crds = rendermod.rendered_crds(paths.chart_dir(), test.values(ROOT), lock=test.lock)
    lifecycle.down()  # one cluster at a time: the fresh one starts after the lifecycle cluster is gone

    fresh = LocalCluster(name=f"pytest-restore-{os.getpid()}", lock=test.lock)
    try:
        fresh.start()
        fresh.apply(crds, server_side=True)  # the platform's CRDs (the chart installs them; no controllers needed)
        fresh.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                      *[f"crd/{c['metadata']['name']}" for c in crds], timeout=90)
        kubectl = tools.require("kubectl", test.lock)
        restore = subprocess.run([str(kubectl), "--kubeconfig", str(fresh.kubeconfig), "apply", "--server-side",
                                  "-f", str(out)], capture_output=True, text=True, timeout=180)
        assert restore.returncode == 0, restore.stderr
        again = backup.collect(backup.Cluster(str(fresh.kubeconfig), None, test.lock))
        restored = [d for docs in again.values() for d in docs]

        def keyed(docs):
            return {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d for d in docs}

        assert keyed(restored).keys() == keyed(saved).keys()
        different = [key for key, doc in keyed(saved).items() if keyed(restored)[key] != doc]
        assert not different, f"restored objects differ from the backup: {different[:5]}"
    finally:
        fresh.stop()


def test_upgrade_from_the_last_release_with_helm_v3_and_roll_back_through_the_cli(lifecycle, tmp_path):
    """The same with helm v3, as users run it: `trainstack e2e --upgrade-from VERSION --helm helm3` (its own
    fresh cluster, torn down at the end)."""
    lifecycle.down()  # one cluster at a time
    summary = tmp_path / "summary.json"
    result = subprocess.run([sys.executable, "-m", "trainstack", "e2e", "--upgrade-from", previous_release(),
                             "--helm", "helm3"], capture_output=True, text=True, timeout=900,
                            env={**os.environ, "TRAINSTACK_E2E_SUMMARY": str(summary)})
    assert result.returncode == 0, result.stderr[-2000:]
    data = json.loads(summary.read_text())
    [run] = data["upgrade"]["runs"]
    lifecycle.figures["upgrade-helm3"] = run
    assert run["passed"] and all(s["result"] == "pass" for s in run["steps"]), run["steps"]
    steps = {s["step"]: s for s in run["steps"]}
    assert f"helm3: rollback to release {previous_release()}" in steps
    assert "CRDs applied server-side" in steps["helm3: CRDs server-side, then upgrade to the working tree"]["detail"]
    assert run["figures"]["helm3_upgrade_seconds"] > 0 and run["figures"]["helm3_webhook_gap_seconds"] < 30
    assert [s["result"] for s in data["steps"] if s["step"] == "teardown"] == ["pass"]
