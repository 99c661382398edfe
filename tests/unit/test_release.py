"""`trainstack release`: the release record, CHANGELOG.md made from it, and the check on temporary git repos."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import ROOT
from support.cli import assert_one_line_error, run_cli
from trainstack import release, yamlio
from trainstack.errors import UserError

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_SYSTEM": os.devnull}

LOCK = {"schemaVersion": 1, "charts": {"kubeflow-trainer": {"version": "2.3.0"}},
        "images": {"torch": {"registry": "docker.io", "repository": "pytorch/pytorch", "tag": "2.13.0"}},
        "tools": {"helm": {"version": "v4.3.2"}}}


def git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env={**os.environ, **GIT_ENV},
                         check=True)
    return out.stdout.strip()


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def write_releases(repo: Path, entries: list[dict]) -> None:
    (repo / "releases.yaml").write_text(yaml.safe_dump({"schemaVersion": 1, "releases": entries}, sort_keys=False))
    release.write_changelog(repo)


def set_chart_version(repo: Path, version: str) -> None:
    (repo / "charts/trainstack/Chart.yaml").write_text(f"apiVersion: v2\nname: trainstack\nversion: {version}\n")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with a chart, released as 0.1.0 at its first commit."""
    root = tmp_path / "repo"
    (root / "charts/trainstack/templates").mkdir(parents=True)
    (root / "runtimes").mkdir()
    (root / "policies").mkdir()
    set_chart_version(root, "0.1.0")
    (root / "charts/trainstack/values.yaml").write_text("replicas: 1\n")
    (root / "charts/trainstack/templates/a.yaml").write_text("kind: ConfigMap\n")
    (root / "runtimes/torch.yaml").write_text("kind: ClusterTrainingRuntime\n")
    (root / "policies/tag.yaml").write_text("kind: ValidatingAdmissionPolicy\n")
    (root / "trainstack.lock.yaml").write_text(yaml.safe_dump(LOCK))
    (root / "README.md").write_text("hello\n")
    git(root, "init", "-q", "-b", "main")
    first = commit_all(root, "chart 0.1.0")
    write_releases(root, [{"version": "0.1.0", "commit": first, "date": "2026-12-01", "changes": ["First."]}])
    commit_all(root, "record release 0.1.0")
    return root


def check_cli(repo: Path, *extra: str) -> subprocess.CompletedProcess:
    return run_cli("release", "check", *extra, env={"TRAINSTACK_ROOT": str(repo)}, cwd=repo, timeout=60)


def test_unchanged_chart_passes_and_changes_elsewhere_do_not_count(repo: Path) -> None:
    (repo / "README.md").write_text("edited\n")
    commit_all(repo, "docs")
    result = check_cli(repo)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "last release 0.1.0" in result.stdout and "unchanged" in result.stdout


@pytest.mark.parametrize("edit", ["template", "runtime", "policy", "lock-image", "uncommitted", "new-file"])
def test_chart_change_without_version_bump_fails(repo: Path, edit: str) -> None:
    if edit == "template":
        (repo / "charts/trainstack/templates/a.yaml").write_text("kind: Secret\n")
    elif edit == "runtime":
        (repo / "runtimes/torch.yaml").write_text("kind: ClusterTrainingRuntime\nspec: {}\n")
    elif edit == "policy":
        (repo / "policies/tag.yaml").write_text("kind: ValidatingAdmissionPolicy\nspec: {}\n")
    elif edit == "lock-image":
        lock = yamlio.load((repo / "trainstack.lock.yaml").read_text())
        lock["images"]["torch"]["tag"] = "2.14.0"
        (repo / "trainstack.lock.yaml").write_text(yaml.safe_dump(lock))
    elif edit == "new-file":
        (repo / "charts/trainstack/templates/b.yaml").write_text("kind: Service\n")
    if edit != "uncommitted":
        commit_all(repo, edit)
    else:
        (repo / "charts/trainstack/values.yaml").write_text("replicas: 2\n")  # not committed: still counts
    result = check_cli(repo)
    assert result.returncode == 1, result.stdout
    assert "the chart changed since release 0.1.0" in result.stdout
    assert "its version is still 0.1.0" in result.stdout
    assert "no entry for the next release" in result.stdout
    expected = {"template": "charts/trainstack/templates/a.yaml", "runtime": "runtimes/torch.yaml",
                "policy": "policies/tag.yaml", "lock-image": "trainstack.lock.yaml (images)",
                "uncommitted": "charts/trainstack/values.yaml", "new-file": "charts/trainstack/templates/b.yaml"}
    assert expected[edit] in result.stdout


def test_lock_change_outside_chart_sections_does_not_count(repo: Path) -> None:
    lock = yamlio.load((repo / "trainstack.lock.yaml").read_text())
    lock["tools"]["helm"]["version"] = "v4.3.3"
    (repo / "trainstack.lock.yaml").write_text(yaml.safe_dump(lock))
    commit_all(repo, "tool bump")
    assert check_cli(repo).returncode == 0


def test_version_bump_needs_an_entry_then_a_fresh_changelog(repo: Path) -> None:
    (repo / "charts/trainstack/values.yaml").write_text("replicas: 2\n")
    set_chart_version(repo, "0.1.1")
    result = check_cli(repo)
    assert result.returncode == 1
    assert "no entry for the next release" in result.stdout and "its version is still" not in result.stdout

    entries = yamlio.load((repo / "releases.yaml").read_text())["releases"]
    new = {"version": "0.1.1", "changes": ["Two replicas."], "upgrade": ["Nothing."]}
    (repo / "releases.yaml").write_text(yaml.safe_dump({"schemaVersion": 1, "releases": [new, *entries]}))
    result = check_cli(repo)  # the changelog was not regenerated
    assert result.returncode == 1 and "CHANGELOG.md is stale" in result.stdout

    assert run_cli("release", "changelog", env={"TRAINSTACK_ROOT": str(repo)}, cwd=repo).returncode == 0
    assert "## 0.1.1 (unreleased)" in (repo / "CHANGELOG.md").read_text()
    result = check_cli(repo, "--output", "json")
    assert result.returncode == 0, result.stdout
    data = yamlio.load(result.stdout)
    assert data["ok"] and data["pending"] == "0.1.1" and "charts/trainstack/values.yaml" in data["changed"]


def test_entry_version_must_match_chart_version(repo: Path) -> None:
    (repo / "charts/trainstack/values.yaml").write_text("replicas: 2\n")
    set_chart_version(repo, "0.2.0")
    entries = yamlio.load((repo / "releases.yaml").read_text())["releases"]
    write_releases(repo, [{"version": "0.1.1", "changes": ["x"]}, *entries])
    result = check_cli(repo)
    assert result.returncode == 1 and "the next release is 0.1.1 but" in result.stdout


def test_cut_records_head_and_changelog_names_the_commit(repo: Path) -> None:
    (repo / "charts/trainstack/values.yaml").write_text("replicas: 2\n")
    set_chart_version(repo, "0.2.0")
    entries = yamlio.load((repo / "releases.yaml").read_text())["releases"]
    write_releases(repo, [{"version": "0.2.0", "changes": ["Two replicas."]}, *entries])
    head = commit_all(repo, "0.2.0")
    result = run_cli("release", "cut", env={"TRAINSTACK_ROOT": str(repo)}, cwd=repo, timeout=60)
    assert result.returncode == 0, result.stderr
    cut = release.load(repo / "releases.yaml")[0]
    assert cut.version == "0.2.0" and cut.commit == head and cut.date
    assert f"Cut from commit `{head}`" in (repo / "CHANGELOG.md").read_text()
    commit_all(repo, "record 0.2.0")
    assert check_cli(repo).returncode == 0
    assert release.resolve(repo, "0.2.0") == (head, "release 0.2.0")
    assert release.resolve(repo, "v0.2.0")[0] == head


def test_cut_refuses_when_the_commit_has_another_version(repo: Path) -> None:
    entries = yamlio.load((repo / "releases.yaml").read_text())["releases"]
    write_releases(repo, [{"version": "0.2.0", "changes": ["x"]}, *entries])
    commit_all(repo, "entry only")
    result = run_cli("release", "cut", env={"TRAINSTACK_ROOT": str(repo)}, cwd=repo, timeout=60)
    assert_one_line_error(result, "says version 0.1.0, the next release is 0.2.0")


def test_tag_must_point_at_the_recorded_commit(repo: Path) -> None:
    git(repo, "tag", "v0.1.0", "HEAD")  # HEAD is the record commit, not the one 0.1.0 was cut from
    result = check_cli(repo)
    assert result.returncode == 1 and "tag v0.1.0 points at" in result.stdout


def test_resolve_git_refs_and_unknown_ref(repo: Path) -> None:
    head = git(repo, "rev-parse", "HEAD")
    assert release.resolve(repo, "main")[0] == head
    assert release.resolve(repo, "HEAD~1")[0] == release.load(repo / "releases.yaml")[0].commit
    with pytest.raises(UserError, match="unknown git ref 'no-such-ref'") as err:
        release.resolve(repo, "no-such-ref")
    assert err.value.exit_code == 2


@pytest.mark.parametrize(
    ("entries", "fragment"),
    [
        ([{"version": "1.0", "changes": ["x"]}], "releases[0].version '1.0' is not a semver version"),
        ([{"version": "0.1.0", "commit": "abc", "date": "2026-12-01", "changes": ["x"]}], "full 40-character"),
        ([{"version": "0.1.0", "changes": []}], "release 0.1.0: changes must say what changed"),
        ([{"version": "0.1.0", "changes": ["x"], "color": "red"}], "unknown field(s) color"),
        ([{"version": "0.1.1", "changes": ["x"], "breaking": True},
          {"version": "0.1.0", "commit": "a" * 40, "date": "2026-12-01", "changes": ["x"]}],
         "marked breaking, but 0.1.0 -> 0.1.1 is a patch bump"),
        ([{"version": "0.1.0", "commit": "a" * 40, "date": "2026-12-01", "changes": ["x"]},
          {"version": "0.2.0", "commit": "b" * 40, "date": "2026-12-02", "changes": ["x"]}], "is not newer"),
        ([{"version": "0.3.0", "changes": ["x"]}, {"version": "0.2.0", "changes": ["x"]}],
         "release 0.2.0 has no commit but is not the newest"),
    ],
)
def test_bad_record_is_one_line_naming_file_and_field(repo: Path, entries: list[dict], fragment: str) -> None:
    (repo / "releases.yaml").write_text(yaml.safe_dump({"schemaVersion": 1, "releases": entries}))
    assert_one_line_error(check_cli(repo), "releases.yaml", fragment)


def test_record_that_is_not_yaml(repo: Path) -> None:
    (repo / "releases.yaml").write_text("releases: [\n")
    assert_one_line_error(check_cli(repo), "releases.yaml line", "not valid YAML")


def test_semver_ordering_and_breaking_bumps() -> None:
    assert release.semver_key("1.0.0-rc.1") < release.semver_key("1.0.0") < release.semver_key("1.0.1")
    assert release.semver_key("0.9.0") < release.semver_key("0.10.0")
    assert release.is_breaking_bump("0.1.0", "0.2.0") and not release.is_breaking_bump("1.1.0", "1.2.0")
    assert release.is_breaking_bump("1.4.2", "2.0.0") and not release.is_breaking_bump("0.1.0", "0.1.1")


def test_this_repository_passes_its_own_release_check() -> None:
    """The real record: CHANGELOG.md is generated from releases.yaml and the chart matches the last release."""
    assert not release.write_changelog(ROOT, check=True), "CHANGELOG.md is stale: run 'trainstack release changelog'"
    releases = release.load(ROOT / "releases.yaml")
    first = releases[-1]
    assert first.cut and first.version == "0.1.0"
    result = check_cli(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
