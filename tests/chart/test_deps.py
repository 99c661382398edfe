"""`trainstack deps`: OCI first, else verified upstream source; byte-stable; clear failures."""

from __future__ import annotations

import json
import shutil
import tarfile
import threading

import pytest
import yaml

from conftest import ROOT
from support.cli import assert_one_line_error, run_cli
from trainstack import yamlio

pytestmark = pytest.mark.slow


def test_dependencies_report_names_the_source(chart_ready, lock):
    report = json.loads((chart_ready / "charts" / ".trainstack-deps.json").read_text())
    assert report["source"] in ("oci", "source")
    assert set(report["charts"]) == {p.name for p in lock.charts()}
    assert "trainjobs.trainer.kubeflow.org" in report["crds"]


def test_source_build_is_byte_stable_and_matches_published_layout(chart_ready, lock, tmp_path):
    from trainstack import deps

    first, second = tmp_path / "a", tmp_path / "b"
    built_a = deps._build_from_source(chart_ready, lock, first)
    built_b = deps._build_from_source(chart_ready, lock, second)
    assert built_a.keys() == built_b.keys()
    for name in built_a:
        assert (first / f"{name}-{lock.chart(name).version}.tgz").read_bytes() == \
               (second / f"{name}-{lock.chart(name).version}.tgz").read_bytes()
    jobset, lws, trainer = (lock.chart(n).version for n in ("jobset", "lws", "kubeflow-trainer"))
    with tarfile.open(first / f"jobset-{jobset}.tgz") as archive:
        values = yamlio.load(archive.extractfile("jobset/values.yaml").read())
        image = lock.image("jobset-controller")
        assert values["image"]["repository"] == f"{image.registry}/{image.repository}"  # not the git staging image
        assert values["image"]["pullPolicy"] == "IfNotPresent"
    with tarfile.open(first / f"lws-{lws}.tgz") as archive:
        assert yamlio.load(archive.extractfile("lws/Chart.yaml").read())["version"] == lws  # git says 0.1.0
    with tarfile.open(first / f"kubeflow-trainer-{trainer}.tgz") as archive:
        names = archive.getnames()
        assert f"kubeflow-trainer/charts/jobset-{jobset}.tgz" in names


def test_checksum_mismatch_is_refused(lock, tmp_path):
    data = yamlio.load((ROOT / "trainstack.lock.yaml").read_text())
    data["charts"]["jobset"]["source"]["sum"] = "h1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
    broken = tmp_path / "lock.yaml"
    broken.write_text(yaml.safe_dump(data))
    repo = _copy_repo(tmp_path)
    result = run_cli("deps", "--source", "source", env={"TRAINSTACK_LOCK": str(broken), "TRAINSTACK_ROOT": str(repo)})
    assert_one_line_error(result, "checksum mismatch for sigs.k8s.io/jobset@v0.12.0")


def _copy_repo(tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "charts" / "trainstack", repo / "charts" / "trainstack",
                    ignore=shutil.ignore_patterns("charts", "crds"))
    shutil.copy(ROOT / "trainstack.lock.yaml", repo / "trainstack.lock.yaml")
    return repo


def test_unreachable_oci_registry_is_one_clear_line(tmp_path):
    repo = _copy_repo(tmp_path)
    # Point the chart at an address nothing listens on, keeping Chart.lock in step.
    chart = yamlio.load((repo / "charts/trainstack/Chart.yaml").read_text())
    lock = yamlio.load((repo / "trainstack.lock.yaml").read_text())
    for dep in chart["dependencies"]:
        dep["repository"] = "oci://127.0.0.1:9/charts"
        lock["charts"][dep["name"]]["oci"] = "oci://127.0.0.1:9/charts"
    (repo / "charts/trainstack/Chart.yaml").write_text(yaml.safe_dump(chart))
    (repo / "trainstack.lock.yaml").write_text(yaml.safe_dump(lock))
    env = {"TRAINSTACK_ROOT": str(repo), "TRAINSTACK_LOCK": str(repo / "trainstack.lock.yaml")}
    assert run_cli("deps", "lock", env=env).returncode == 0
    result = run_cli("deps", "--source", "oci", env=env)
    assert_one_line_error(result, "OCI chart repositories could not be reached", "--source source")
    fallback = run_cli("deps", env=env)
    assert fallback.returncode == 0, fallback.stderr
    assert "dependency source: source" in fallback.stdout


def test_broken_chart_is_one_clear_line(tmp_path):
    repo = _copy_repo(tmp_path)
    (repo / "charts/trainstack/Chart.yaml").write_text("dependencies: [oops\n")
    result = run_cli("deps", env={"TRAINSTACK_ROOT": str(repo)})
    assert_one_line_error(result, "Chart.yaml")


def test_chart_lock_out_of_date_is_reported(tmp_path):
    repo = _copy_repo(tmp_path)
    chart = yamlio.load((repo / "charts/trainstack/Chart.yaml").read_text())
    chart["dependencies"][1]["condition"] = "something.else"
    (repo / "charts/trainstack/Chart.yaml").write_text(yaml.safe_dump(chart))
    result = run_cli("deps", env={"TRAINSTACK_ROOT": str(repo)})
    assert_one_line_error(result, "Chart.lock is out of date", "trainstack deps lock")


def test_crds_are_generated_not_committed(chart_ready):
    import subprocess

    tracked = subprocess.run(["git", "ls-files", "charts/trainstack/crds", "charts/trainstack/charts"],
                             cwd=ROOT, capture_output=True, text=True).stdout
    assert tracked.strip() == ""
    assert (chart_ready / "crds" / "trainjobs.trainer.kubeflow.org.yaml").is_file()


def test_second_run_does_no_work_and_says_so(tmp_path):
    repo = _copy_repo(tmp_path)
    env = {"TRAINSTACK_ROOT": str(repo)}
    first = run_cli("deps", "--source", "source", env=env)
    assert first.returncode == 0, first.stderr
    archive = repo / "charts/trainstack/charts/jobset-0.12.0.tgz"
    mtime = archive.stat().st_mtime_ns
    second = run_cli("deps", env=env)
    assert second.returncode == 0 and "nothing to do" in second.stderr
    assert archive.stat().st_mtime_ns == mtime
    report = json.loads((repo / "charts/trainstack/charts/.trainstack-deps.json").read_text())
    assert set(report["sources"]) >= {"argocd", "kwok"}  # every upstream source is fetched and verified up front


def test_a_fresh_checkout_of_a_built_lock_copies_the_same_dependencies(chart_ready, lock, tmp_path, monkeypatch):
    """A second checkout (CI's clone, the Argo CD plugin's fresh copy) gets the very files a build of
    the same lock and build code made, without building; a changed lock builds anew."""
    from trainstack import deps

    built = tmp_path / "built"
    shutil.copytree(chart_ready, built, symlinks=True)
    deps.build(source="source", chart_dir=built, lock=lock, force=True)  # builds, and stores its output
    fresh = tmp_path / "fresh"
    shutil.copytree(chart_ready, fresh, symlinks=True, ignore=shutil.ignore_patterns("*.tgz", ".trainstack-deps.json"))
    shutil.rmtree(fresh / "crds")

    def no_build(*args, **kwargs):
        raise AssertionError("built again although the same lock was built before")

    monkeypatch.setattr(deps, "_build_from_source", no_build)
    result = deps.build(source="source", chart_dir=fresh, lock=lock, force=False, sources=False)
    assert result.source == "source" and sorted(result.charts) == sorted(p.name for p in lock.charts())
    for sub in ("charts", "crds"):
        names = sorted(p.name for p in (built / sub).iterdir() if p.is_file())
        assert names == sorted(p.name for p in (fresh / sub).iterdir() if p.is_file())
        for name in names:
            if name != ".trainstack-deps.json":
                assert (built / sub / name).read_bytes() == (fresh / sub / name).read_bytes(), name
    assert deps.up_to_date(fresh, lock)
    # another Chart.yaml is another fingerprint: nothing stored for it, so it builds
    (fresh / "Chart.yaml").write_text((fresh / "Chart.yaml").read_text() + "# changed\n")
    with pytest.raises(AssertionError, match="built again"):
        deps.build(source="source", chart_dir=fresh, lock=lock, force=False, sources=False)


def test_a_render_beside_two_rebuilds_always_finds_every_dependency(chart_ready, lock, tmp_path):
    """Two builds of one chart at once (two xdist workers, a render in another shell) take turns, and a
    `helm template` running all the while finds every dependency: the chart tier once failed 15
    renders with "missing in charts/ directory" while the folder was emptied and refilled."""
    from trainstack import deps, helm

    chart = tmp_path / "trainstack"
    shutil.copytree(chart_ready, chart, symlinks=True)
    failures: list[Exception] = []

    def rebuild() -> None:
        try:
            for _ in range(2):
                deps.build(source="source", chart_dir=chart, lock=lock, force=True, sources=False)
        except Exception as err:  # noqa: BLE001 - any failure, reported by the assertion below
            failures.append(err)

    builders = [threading.Thread(target=rebuild) for _ in range(2)]
    for builder in builders:
        builder.start()
    renders = 0
    while any(builder.is_alive() for builder in builders):
        result = helm.run(helm.template_args(chart, release="race"), lock=lock, check=False)
        assert result.returncode == 0, result.stderr
        renders += 1
    for builder in builders:
        builder.join()
    assert failures == []
    assert renders >= 2  # the renders did run beside the builds
    assert deps.up_to_date(chart, lock)
    assert sorted(p.name for p in (chart / "charts").iterdir()) == sorted(
        [f"{p.name}-{p.version}.tgz" for p in lock.charts()] + [".trainstack-deps.json"])
    assert not list(tmp_path.glob(".trainstack-deps-*"))  # the staging folders are gone
