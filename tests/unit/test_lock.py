"""The lock is the one place versions live, and everything agrees with it."""

from __future__ import annotations

import re
import tomllib

import yaml

from conftest import ROOT
from support.cli import assert_one_line_error, run_cli
from trainstack import yamlio


def test_lock_check_passes():
    result = run_cli("lock", "check")
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_image_is_pinned_with_registry_repository_tag_and_digest_field(lock):
    for image in lock.images():
        assert image.registry and image.repository
        assert image.tag not in ("", "latest", "main", "master")
        assert "digest" in lock.data["images"][image.name]


def test_required_pins_are_present(lock):
    assert lock.tool("kubernetes").version.startswith("v1.36.")
    assert lock.tool("etcd").version.startswith("v3.6.")
    assert lock.tool("helm").version.startswith("v4.")
    major, minor = (int(x) for x in lock.tool("helm3").version.lstrip("v").split(".")[:2])
    assert (major, minor) >= (3, 18)
    assert lock.chart("kubeflow-trainer").version == "2.3.0"
    assert lock.chart("jobset").version == "0.12.0"
    for name in ("kind", "kwok", "kustomize", "kubeconform"):
        assert re.match(r"^v\d+\.\d+\.\d+$", lock.tool(name).version)
    assert "kubectl" in lock.tool("kubernetes").packages


def test_every_file_carries_the_locks_versions():
    """Chart.yaml, the values' image keys, the chart README header and pyproject.toml are written
    from the lock by `trainstack lock sync`; `lock sync --check` fails when one is stale."""
    result = run_cli("lock", "sync", "--check")
    assert result.returncode == 0, result.stdout + result.stderr


def _copy_synced_files(tmp_path):
    from trainstack import locksync

    for rel, _ in locksync.TARGETS:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text((ROOT / rel).read_text())
    (tmp_path / "trainstack.lock.yaml").write_text((ROOT / "trainstack.lock.yaml").read_text())


def test_lock_sync_writes_a_new_version_everywhere_and_keeps_comments(tmp_path):
    from trainstack import lock as lockmod
    from trainstack import locksync

    _copy_synced_files(tmp_path)
    lock_path = tmp_path / "trainstack.lock.yaml"
    text = lock_path.read_text()
    old = lockmod.load(lock_path)
    kueue, jobset_tag = old.chart("kueue").version, old.image("jobset-controller").tag
    text = text.replace(f"    version: {kueue}\n    oci: oci://", "    version: 9.8.7\n    oci: oci://", 1)
    text = text.replace(f"repository: jobset/jobset, tag: {jobset_tag},", "repository: jobset/jobset, tag: v9.9.9,")
    text = text.replace('    rich: ">=13.7"', '    rich: ">=14.0"')
    lock_path.write_text(text)
    lockmod._load.cache_clear()  # the loader caches by path
    new = lockmod.load(lock_path)
    assert new.chart("kueue").version == "9.8.7" and new.image("jobset-controller").tag == "v9.9.9"

    before = {rel: (tmp_path / rel).read_text() for rel, _ in locksync.TARGETS}
    stale = locksync.sync(tmp_path, new, check=True)
    assert set(stale) == {"charts/trainstack/Chart.yaml", "charts/trainstack/values.yaml",
                          "charts/trainstack/README.header.md", "pyproject.toml"}
    assert {rel: (tmp_path / rel).read_text() for rel, _ in locksync.TARGETS} == before, "--check writes nothing"
    assert sorted(locksync.sync(tmp_path, new)) == sorted(stale)
    assert locksync.sync(tmp_path, new, check=True) == []

    chart = yamlio.load((tmp_path / "charts/trainstack/Chart.yaml").read_text())
    assert {d["name"]: d["version"] for d in chart["dependencies"]}["kueue"] == "9.8.7"
    values = yamlio.load((tmp_path / "charts/trainstack/values.yaml").read_text())
    assert values["jobset"]["image"]["tag"] == "v9.9.9"
    assert "| `kueue` | 9.8.7 |" in (tmp_path / "charts/trainstack/README.header.md").read_text()
    project = tomllib.loads((tmp_path / "pyproject.toml").read_text())["project"]
    assert "rich>=14.0" in project["dependencies"]
    # only the versions changed: every comment line of values.yaml and Chart.yaml is still there
    for rel in ("charts/trainstack/values.yaml", "charts/trainstack/Chart.yaml", "pyproject.toml"):
        comments = [ln for ln in before[rel].splitlines() if ln.lstrip().startswith("#")]
        after = (tmp_path / rel).read_text().splitlines()
        assert all(c in after for c in comments), rel
        changed = [ln for ln in after if ln not in before[rel].splitlines()]
        assert 0 < len(changed) <= 2, (rel, changed)


def test_a_chart_the_lock_pins_but_chart_yaml_lacks_is_one_line(tmp_path):
    _copy_synced_files(tmp_path)
    chart = tmp_path / "charts/trainstack/Chart.yaml"
    chart.write_text(re.sub(r"  - name: kueue\n(    .*\n)+", "", chart.read_text()))
    result = run_cli("lock", "sync", env={"TRAINSTACK_LOCK": str(tmp_path / "trainstack.lock.yaml"),
                                          "TRAINSTACK_ROOT": str(tmp_path)})
    assert_one_line_error(result, "charts/trainstack/Chart.yaml: dependencies has no kueue")


def test_missing_lock_entry_is_one_clear_line(tmp_path):
    data = yamlio.load((ROOT / "trainstack.lock.yaml").read_text())
    del data["tools"]["helm"]["version"]
    broken = tmp_path / "lock.yaml"
    broken.write_text(yaml.safe_dump(data))
    result = run_cli("tools", "list", env={"TRAINSTACK_LOCK": str(broken)})
    assert_one_line_error(result, "missing lock entry 'tools.helm.version'", str(broken))


def test_lock_that_is_not_yaml_is_one_clear_line(tmp_path):
    broken = tmp_path / "lock.yaml"
    broken.write_text("tools: [unclosed\n")
    result = run_cli("lock", "check", env={"TRAINSTACK_LOCK": str(broken)})
    assert_one_line_error(result, str(broken), "not valid YAML")


def test_floating_tag_in_lock_is_reported(tmp_path):
    data = yamlio.load((ROOT / "trainstack.lock.yaml").read_text())
    data["images"]["torch"]["tag"] = "latest"
    broken = tmp_path / "lock.yaml"
    broken.write_text(yaml.safe_dump(data))
    result = run_cli("lock", "check", env={"TRAINSTACK_LOCK": str(broken)})
    assert result.returncode == 1
    assert "images.torch.tag 'latest' floats" in result.stdout


def test_the_makefile_installs_the_venv_with_the_locks_exact_uv(lock):
    """`make venv` reads the uv version from the lock's python.uv line: the same exact version."""
    import subprocess

    pinned = lock.get("python")["uv"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", pinned), pinned
    made = subprocess.run(["make", "-s", "--no-print-directory", "--eval", "print-uv: ; @echo $(UV_VERSION)",
                           "print-uv"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert made.returncode == 0 and made.stdout.strip() == pinned, made
