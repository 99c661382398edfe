"""The parts of the upgrade test that need no cluster: exporting the old tree, CRDs a chart ships,
what counts as a loss, the webhook gap and helm's conflict lines."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from support.cli import run_cli
from trainstack import lock as lockmod
from trainstack import release
from trainstack import render as rendermod
from trainstack.e2e import clusterstate, oldrelease, upgrade
from trainstack.errors import UserError

from .test_release import commit_all, git, repo  # noqa: F401  (the temporary repository fixture)


def test_export_release_and_refs_without_touching_the_checkout(repo: Path, tmp_path: Path) -> None:  # noqa: F811
    first = release.load(repo / "releases.yaml")[0].commit
    (repo / "charts/trainstack/values.yaml").write_text("replicas: 5\n")  # uncommitted, must not leak in
    commit, label = oldrelease.export_ref(repo, "0.1.0", tmp_path / "old")
    assert commit == first and label == "release 0.1.0"
    assert (tmp_path / "old/charts/trainstack/values.yaml").read_text() == "replicas: 1\n"
    assert not (tmp_path / "old/releases.yaml").exists()  # the tree as it was at that commit
    assert (repo / "charts/trainstack/values.yaml").read_text() == "replicas: 5\n"
    assert git(repo, "status", "--porcelain") == "M charts/trainstack/values.yaml"
    commit, label = oldrelease.export_ref(repo, "main", tmp_path / "head")
    assert label.startswith("ref main") and (tmp_path / "head/releases.yaml").is_file()


def test_unknown_ref_is_a_usage_error(repo: Path, tmp_path: Path) -> None:  # noqa: F811
    with pytest.raises(UserError, match="unknown git ref 'v9.9.9'") as err:
        oldrelease.export_ref(repo, "v9.9.9", tmp_path / "old")
    assert err.value.exit_code == 2 and not (tmp_path / "old").exists()


def test_ref_without_a_chart_is_refused(repo: Path, tmp_path: Path) -> None:  # noqa: F811
    git(repo, "rm", "-q", "-r", "charts")
    commit_all(repo, "no chart")
    with pytest.raises(UserError, match="not a trainstack release"):
        oldrelease.export_ref(repo, "HEAD", tmp_path / "old")


def _crd(name: str) -> dict:
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": name},
            "spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema": {"type": "object"}}}]}}


def test_crd_documents_include_the_dependencies_crds_folders(tmp_path: Path) -> None:
    chart = tmp_path / "chart"
    (chart / "crds").mkdir(parents=True)
    (chart / "crds/trainjobs.yaml").write_text(yaml.safe_dump(_crd("trainjobs.trainer.kubeflow.org")))
    (chart / "charts").mkdir()
    with tarfile.open(chart / "charts/jobset-0.12.0.tgz", "w:gz") as tar:
        for member, doc in (("jobset/crds/jobsets.yaml", _crd("jobsets.jobset.x-k8s.io")),
                            ("jobset/templates/cm.yaml", {"kind": "ConfigMap", "metadata": {"name": "x"}})):
            data = yaml.safe_dump(doc).encode()
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    names = [d["metadata"]["name"] for d in rendermod.crd_documents(chart)]
    assert names == ["trainjobs.trainer.kubeflow.org", "jobsets.jobset.x-k8s.io"]


def snap(trainjobs: dict, jobsets: set = frozenset(), runtimes: set = frozenset()) -> clusterstate.Snapshot:
    return clusterstate.Snapshot(trainjobs, set(jobsets), set(runtimes), {})


def test_losses() -> None:
    before = snap({"ns/a": ("Complete", "t1"), "ns/b": ("", ""), "ns/c": ("Failed", "t2")}, {"ns/a", "ns/b"},
                  {"ClusterTrainingRuntime//torch-distributed"})
    assert clusterstate.losses(before, before) == []
    running_done = snap({"ns/a": ("Complete", "t1"), "ns/b": ("Complete", "t3"), "ns/c": ("Failed", "t2")},
                        {"ns/a", "ns/b"}, {"ClusterTrainingRuntime//torch-distributed"})
    assert clusterstate.losses(before, running_done) == []  # a running job finishing is not a loss
    after = snap({"ns/a": ("", ""), "ns/b": ("", "")}, {"ns/b"}, set())
    problems = clusterstate.losses(before, after)
    assert problems == ["TrainJobs lost: ns/c", "finished TrainJobs changed status: ns/a (Complete -> not finished)",
                        "JobSets lost: ns/a", "runtimes lost: ClusterTrainingRuntime//torch-distributed"]
    assert clusterstate.losses(before, snap(before.trainjobs, before.jobsets, set()),
                          expect_gone={"ClusterTrainingRuntime//torch-distributed"}) == []


def test_longest_gap() -> None:
    assert clusterstate.longest_gap([]) == 0
    assert clusterstate.longest_gap([(0, True), (1, True)]) == 0
    samples = [(0.0, True), (1.0, False), (1.5, False), (2.0, True), (3.0, False), (6.0, True)]
    assert clusterstate.longest_gap(samples) == 3.0
    assert clusterstate.longest_gap([(0.0, True), (1.0, False), (4.5, False)]) == 3.5  # still rejecting at the end


def test_conflicts_from_helm_output() -> None:
    out = ("Release \"trainstack\" has been upgraded.\n"
           "Error: UPGRADE FAILED: conflict occurred while applying object kubeflow-system/jobset-webhook-server-cert "
           "/v1, Kind=Secret: Apply failed with 4 conflicts: conflicts with \"jobset\" using v1:\n")
    assert len(clusterstate.conflicts(out)) == 1 and "jobset-webhook-server-cert" in clusterstate.conflicts(out)[0]
    assert clusterstate.conflicts("Release upgraded\n") == []


def test_terminal_state() -> None:
    job = {"status": {"conditions": [{"type": "Suspended", "status": "False"},
                                     {"type": "Complete", "status": "True", "lastTransitionTime": "t"}]}}
    assert clusterstate.terminal(job) == ("Complete", "t")
    assert clusterstate.terminal({"status": {}}) == ("", "")


def test_git_archive_is_what_export_uses(repo: Path, tmp_path: Path) -> None:  # noqa: F811
    """The exported tree equals git's own listing of the commit (no untracked or ignored files)."""
    commit, _ = oldrelease.export_ref(repo, "HEAD", tmp_path / "t")
    listed = set(subprocess.run(["git", "-C", str(repo), "ls-tree", "-r", "--name-only", commit], capture_output=True,
                                text=True, check=True).stdout.split())
    exported = {str(p.relative_to(tmp_path / "t")) for p in (tmp_path / "t").rglob("*") if p.is_file()}
    assert exported == listed


OLDEST = lockmod.load().kubernetes_matrix()[0]


@pytest.mark.parametrize(("args", "message"), [
    (["--upgrade-from", "v9.9.9"], "error: unknown git ref 'v9.9.9'"),
    (["--upgrade-from", "0.1.0", "--nodes", "real"], "error: --upgrade-from runs on KWOK nodes"),
    (["--upgrade-from", "0.1.0", "--provider", "existing"], "error: --upgrade-from installs the old release"),
    (["--kube-upgrade-to", "1.99"], "error: --kube-upgrade-to 1.99: not a tested release"),
    (["--kube-upgrade-to", OLDEST], f"error: --kube-upgrade-to {OLDEST}: not newer than the cluster's"),
    (["--kube-upgrade-to", lockmod.load().kubernetes_matrix()[-1], "--nodes", "real"], "error: --kube-upgrade-to runs alone on the local provider"),
])
def test_e2e_upgrade_from_bad_input_is_one_line_before_any_cluster(args: list[str], message: str,
                                                                   tmp_path: Path) -> None:
    """Refused before a cluster starts or a run folder is made (nothing changed anywhere)."""
    result = run_cli("e2e", *args, env={"TRAINSTACK_CACHE": str(tmp_path / "cache")}, timeout=120)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), result.stderr
    assert not (tmp_path / "cache" / "e2e").exists()


def test_held_trainjobs_are_suspended_and_carry_the_policy_labels(tmp_path: Path) -> None:
    test = upgrade.UpgradeTest.__new__(upgrade.UpgradeTest)  # no cluster: only the manifest builder
    test.labels = {"team": "ml"}
    job = test.trainjob("held", "torch-distributed", 30, suspend=True)
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["labels"] == {upgrade.LABEL: "upgrade", "team": "ml"}
    assert "suspend" not in test.trainjob("run", "torch-distributed")["spec"]
