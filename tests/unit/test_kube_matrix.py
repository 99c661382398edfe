"""The Kubernetes releases trainstack claims and tests: the lock's kubernetes.supported and .matrix, the
chart's kubeVersion written from them, a release chosen with TRAINSTACK_KUBERNETES, and how
`make test-matrix` (trainstack bench matrix) picks releases and sums up."""

from __future__ import annotations

import copy

import pytest

from conftest import ROOT
from support.cli import run_cli
from trainstack import lock as lockmod
from trainstack import yamlio
from trainstack.benchmarks import matrix
from trainstack.errors import UsageError, UserError


def with_kube(lock: lockmod.Lock, **changes) -> lockmod.Lock:
    data = copy.deepcopy(lock.data)
    data["kubernetes"].update(changes)
    return lockmod.Lock(path=lock.path, data=data)


def test_the_chart_claims_exactly_the_supported_range_and_both_ends_are_tested(lock):
    oldest, newest = lock.kubernetes_supported
    chart = yamlio.load((ROOT / "charts" / "trainstack" / "Chart.yaml").read_text())
    assert chart["kubeVersion"] == f">={oldest}.0-0 <1.{int(newest.split('.')[1]) + 1}.0-0"
    tested = {lockmod.minor_of(v) for v in lock.kubernetes_matrix()}
    assert {oldest, newest} <= tested
    # upstream Trainer's own default (1.35) and the control plane make test runs on are tested too
    assert {"1.35", lockmod.minor_of(lock.kubernetes_version)} <= tested


def test_every_minor_of_the_range_is_tested(lock):
    oldest, newest = (int(m.split(".")[1]) for m in lock.kubernetes_supported)
    assert {lockmod.minor_of(v) for v in lock.kubernetes_matrix()} == {f"1.{m}" for m in range(oldest, newest + 1)}


def test_a_matrix_release_swaps_the_control_plane_its_gates_and_validates_schemas(lock):
    other = next(v for v in lock.kubernetes_matrix() if v != lock.kubernetes_version)
    derived = lock.for_kubernetes(other)
    assert derived.kubernetes_version == other
    assert derived.tool("kubernetes").version == derived.tool("kubernetes-node").version == other
    assert derived.source("kubernetes-openapi").version == other
    assert derived.source("kubernetes-openapi").sum == lock.kubernetes_sums()[other]
    assert derived.kubernetes_feature_gates == lock.data["kubernetes"]["matrix"][other].get("featureGates", {})
    # the lock read is untouched, and the pinned release is the lock itself
    assert lock.tool("kubernetes").version == lock.kubernetes_version
    assert lock.for_kubernetes(lock.kubernetes_version) is lock


def test_an_untested_release_is_one_line_naming_the_lock_and_the_tested_ones(lock):
    with pytest.raises(UserError) as err:
        lock.for_kubernetes("v1.30.1")
    assert "kubernetes.matrix" in err.value.message and lock.kubernetes_version in err.value.message


def test_trainstack_kubernetes_picks_the_release_for_every_lock_read(monkeypatch, lock):
    other = next(v for v in lock.kubernetes_matrix() if v != lock.kubernetes_version)
    monkeypatch.setenv(lockmod.KUBERNETES_ENV, other)
    assert lockmod.load(ROOT / "trainstack.lock.yaml").tool("kubernetes").version == other
    monkeypatch.delenv(lockmod.KUBERNETES_ENV)
    assert lockmod.load(ROOT / "trainstack.lock.yaml").tool("kubernetes").version == lock.kubernetes_version


def test_an_untested_release_in_the_environment_is_one_line():
    result = run_cli("tools", "list", env={lockmod.KUBERNETES_ENV: "v1.30.1"})
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith("error: TRAINSTACK_KUBERNETES=v1.30.1:"), result.stderr


@pytest.mark.parametrize(("changes", "fragment"), [
    ({"supported": {"oldest": "1.32", "newest": "1.37"}}, "names 1.32, but no release of 1.32 is tested"),
    ({"supported": {"oldest": "1.34", "newest": "1.37"}}, "is tested but outside kubernetes.supported"),
    ({"supported": {"oldest": "1.37", "newest": "1.33"}}, "oldest 1.37 is newer than newest 1.33"),
    ({"supported": {"oldest": 1.33, "newest": "1.37"}}, "kubernetes.supported.oldest"),
    ({"matrix": {"v1.33.13": {"sum": "md5:x"}}}, "kubernetes.matrix.v1.33.13.sum"),
    ({"matrix": {"1.33": {"sum": "h1:x"}}}, "must be a Kubernetes release"),
    ({"matrix": {"v1.33.13": {"sum": "h1:x", "gates": {}}}}, "unknown keys ['gates']"),
])
def test_a_broken_range_or_matrix_is_named_by_lock_check(lock, changes, fragment):
    problems = with_kube(lock, **changes).problems()
    assert any(fragment in p for p in problems), problems


def test_the_pinned_lock_has_no_range_problems(lock):
    assert lock.problems() == []


def test_matrix_releases_by_minor_or_release_and_unknown_is_a_usage_error(lock):
    tested = lock.kubernetes_matrix()
    assert matrix.releases(lock, None) == tested
    oldest = tested[0]
    assert matrix.releases(lock, f"{lockmod.minor_of(oldest)}, {tested[-1]}") == [oldest, tested[-1]]
    with pytest.raises(UsageError) as err:
        matrix.releases(lock, "1.20")
    assert "1.20 is not tested" in err.value.message


def test_each_part_runs_trainstack_for_the_release_and_upgrades_from_n_minus_1():
    assert matrix.commands("build", "v1.33.13", "0.2.0")[0][-3:] == ["tools", "install", "kubernetes"]
    validate = matrix.commands("validate", "v1.33.13", "0.2.0")[0]
    assert all(env in validate for env in matrix.ENVIRONMENTS) and "--kube-version" not in validate
    e2e = matrix.commands("e2e", "v1.33.13", "0.2.0")[0]
    assert e2e[e2e.index("--nodes") + 1] == "kwok"
    upgrade = matrix.commands("upgrade", "v1.33.13", "0.2.0")[0]
    assert upgrade[upgrade.index("--upgrade-from") + 1] == "0.2.0"
    kube = matrix.commands("kube-upgrade", "v1.33.13", "0.2.0", "v1.34.4")[0]
    assert kube[kube.index("--kube-upgrade-to") + 1] == "v1.34.4"
    assert matrix.commands("kube-upgrade", "v1.37.2", "0.2.0", None) == []


def test_the_summary_counts_releases_that_passed_every_part_and_names_each_failure():
    results = [
        {"version": "v1.33.13", "parts": {"e2e": {"passed": True}, "upgrade": {"passed": False}}},
        {"version": "v1.37.2", "parts": {"e2e": {"passed": True}, "upgrade": {"passed": True}}},
    ]
    line, failed = matrix.summarize(results, ("e2e", "upgrade"))
    assert failed == ["v1.33.13 upgrade"]
    assert line.startswith("1 of 2 Kubernetes releases passed")


def test_the_ci_matrix_has_one_job_per_tested_release_read_from_the_lock():
    """.github/workflows/matrix.yaml lists no version: its first job prints the lock's releases (the same
    function make test-matrix uses) and the second runs make test-matrix for each, which the Makefile has."""
    workflow = yamlio.load((ROOT / ".github" / "workflows" / "matrix.yaml").read_text())
    read = " ".join(step.get("run", "") for step in workflow["jobs"]["releases"]["steps"])
    assert "kubernetes_matrix()" in read
    job = workflow["jobs"]["kubernetes"]
    assert job["strategy"]["matrix"]["release"] == "${{ fromJSON(needs.releases.outputs.releases) }}"
    runs = [step.get("run", "") for step in job["steps"]]
    assert "make test-matrix KUBE_VERSIONS=${{ matrix.release }}" in runs
    assert "\ntest-matrix:" in (ROOT / "Makefile").read_text()
    assert "v1." not in (ROOT / ".github" / "workflows" / "matrix.yaml").read_text()


def test_a_part_that_ran_on_another_api_server_than_its_release_fails():
    def summary(version):
        return {"steps": [{"step": "render the chart", "data": {}},
                          {"step": "cluster (local)", "data": {"serverVersion": version}}]}
    assert matrix.served_release(summary("v1.33.13"), "v1.33.13") == {"served": "v1.33.13"}
    wrong = matrix.served_release(summary("v1.36.3"), "v1.33.13")
    assert wrong["passed"] is False and wrong["served"] == "v1.36.3"
    assert matrix.served_release({"steps": []}, "v1.33.13")["passed"] is False


def test_the_table_has_a_row_per_release_and_names_each_failure(lock):
    results = [
        {"version": "v1.33.13", "pinned": False, "build_seconds": 480.0, "node_build_seconds": None,
         "parts": {"e2e": {"passed": True, "seconds": 40.2},
                   "upgrade": {"passed": False, "seconds": 12.0, "why": "helm upgrade failed"}}},
        {"version": lock.kubernetes_version, "pinned": True, "build_seconds": None, "node_build_seconds": None,
         "parts": {"e2e": {"passed": True, "seconds": 37.0}, "upgrade": {"passed": True, "seconds": 66.0}}},
    ]
    text = matrix.table(results, ("e2e", "upgrade"), lock)
    rows = [ln for ln in text.splitlines() if ln.startswith("| v")]
    assert rows[0] == "| v1.33.13 | pass (40 s) | **FAIL** (12 s) | 480 s | - |"
    assert rows[1].startswith(f"| {lock.kubernetes_version} (make test's) | pass (37 s) | pass (66 s) |")
    assert "- v1.33.13 upgrade: helm upgrade failed" in text


def test_real_nodes_with_another_kubelet_fail_the_part():
    summary = {"steps": [{"step": "cluster (local)",
                          "data": {"serverVersion": "v1.33.13", "kubeletVersions": ["v1.36.3"]}}]}
    wrong = matrix.served_release(summary, "v1.33.13")
    assert wrong["passed"] is False and wrong["kubelets"] == ["v1.36.3"]
    summary["steps"][0]["data"]["kubeletVersions"] = ["v1.33.13"]
    assert matrix.served_release(summary, "v1.33.13") == {"served": "v1.33.13", "kubelets": ["v1.33.13"]}


def test_the_pause_image_follows_the_release(lock):
    other = next(v for v in lock.kubernetes_matrix() if v != lock.kubernetes_version)
    assert lock.data["builtImages"]["pause"]["tag"] == lock.kubernetes_version
    assert lock.for_kubernetes(other).data["builtImages"]["pause"]["tag"] == other


def test_the_newest_release_has_no_cluster_upgrade_to_run(tmp_path):
    skipped = matrix.run_part("kube-upgrade", "v1.37.2", "0.2.0", tmp_path, None)
    assert skipped["passed"] is True and "newest" in skipped["skipped"]


def test_kube_upgrade_swaps_the_binary_and_the_release_switches(lock):
    from trainstack.e2e import kubeupgrade

    newest = lock.kubernetes_matrix()[-1]
    new = kubeupgrade.target_lock(lock, lockmod.minor_of(newest))
    assert new.kubernetes_version == newest
    command = ["/cache/v1.36.3/kube-apiserver", "--etcd-servers=http://127.0.0.1:1",
               "--feature-gates=GangScheduling=true", "--runtime-config", "scheduling.k8s.io/v1alpha2=true"]
    out = kubeupgrade.upgraded_command(command, "/cache/new/kube-apiserver", "kube-apiserver", new)
    assert out[0] == "/cache/new/kube-apiserver" and "--etcd-servers=http://127.0.0.1:1" in out
    assert not any("GangScheduling" in a or "v1alpha2" in a for a in out)
    with pytest.raises(UsageError):
        kubeupgrade.target_lock(lock, lockmod.minor_of(lock.kubernetes_matrix()[0]))  # older than the cluster's
    with pytest.raises(UsageError):
        kubeupgrade.target_lock(lock, "1.99")


def test_a_derived_lock_still_knows_every_tested_release_and_goes_back(lock):
    """From another release the pinned one is still tested (kube-upgrade from 1.35 goes to it), and deriving it
    back gives its own gates, runtime config and schemas' sum."""
    other = lock.kubernetes_matrix()[0]
    derived = lock.for_kubernetes(other)
    assert derived.kubernetes_matrix() == lock.kubernetes_matrix()
    back = derived.for_kubernetes(lock.kubernetes_version)
    assert back.kubernetes_version == lock.kubernetes_version
    assert back.kubernetes_feature_gates == lock.kubernetes_feature_gates
    assert back.kubernetes_scheduler_feature_gates == lock.kubernetes_scheduler_feature_gates
    assert derived.kubernetes_scheduler_feature_gates == {}  # the other releases run the scheduler's defaults
    assert back.kubernetes_runtime_config == lock.kubernetes_runtime_config
    assert back.source("kubernetes-openapi") == lock.source("kubernetes-openapi")
    assert back.tool("kubernetes").version == lock.tool("kubernetes").version
    assert back.data["builtImages"]["pause"]["tag"] == lock.data["builtImages"]["pause"]["tag"]


def test_a_partial_run_keeps_the_earlier_cells_of_releases_still_tested(lock, tmp_path):
    import json

    tested = lock.kubernetes_matrix()
    earlier = {"releases": [
        {"version": tested[0], "parts": {"e2e": {"passed": True, "seconds": 30.0, "commit": "aaa"}}},
        {"version": "v1.20.15", "parts": {"e2e": {"passed": True, "seconds": 30.0, "commit": "aaa"}}},
    ]}
    (tmp_path / "matrix.json").write_text(json.dumps(earlier))
    rows = matrix.earlier_rows(tmp_path / "matrix.json", lock)
    assert list(rows) == [tested[0]]
    rows[tested[0]]["parts"]["upgrade"] = {"passed": True, "seconds": 60.0, "commit": "bbb"}
    text = matrix.table([rows[tested[0]]], ("e2e", "upgrade"), lock, "bbb")
    rows[tested[0]]["parts"]["kube-upgrade"] = {"passed": True, "seconds": 60.0, "commit": "bbb"}
    text = matrix.table([rows[tested[0]]], ("e2e", "upgrade", "kube-upgrade"), lock, "bbb")
    assert f"- aaa: {tested[0]} e2e" in text and "- bbb: every other cell" in text
    assert matrix.earlier_rows(tmp_path / "missing.json", lock) == {}
    earlier["commit"] = "ccc"
    del earlier["releases"][0]["parts"]["e2e"]["commit"]
    (tmp_path / "matrix.json").write_text(json.dumps(earlier))
    assert matrix.earlier_rows(tmp_path / "matrix.json", lock)[tested[0]]["parts"]["e2e"]["commit"] == "ccc"


def test_a_release_is_named_by_minor_or_release_with_or_without_v(lock):
    oldest = lock.kubernetes_matrix()[0]
    minor = lockmod.minor_of(oldest)
    assert {lock.kubernetes_release(t) for t in (minor, f"v{minor}", oldest, oldest.lstrip("v"))} == {oldest}
    assert lock.kubernetes_release("1.20") is None
