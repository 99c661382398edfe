"""One version, one place: the newest release in releases.yaml is the package's version
(`trainstack --version`, the SARIF driver, pyproject's dynamic version) and the chart's."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
import yaml

from conftest import ROOT
from support.cli import run_cli
from trainstack import __version__, release, yamlio
from trainstack.errors import UserError
from trainstack.validate import report


def test_version_is_the_chart_and_the_newest_release() -> None:
    chart = yamlio.load((ROOT / "charts/trainstack/Chart.yaml").read_text())["version"]
    newest = release.load(ROOT / "releases.yaml")[0].version
    result = run_cli("--version", timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"trainstack {chart}" == f"trainstack {newest}" == f"trainstack {__version__}"
    assert release.write_version(ROOT, check=True) == [], "run make generate"


def test_the_sarif_driver_and_the_package_metadata_take_the_same_version() -> None:
    sarif = json.loads(report.to_sarif(report.Result()))
    assert sarif["runs"][0]["tool"]["driver"]["version"] == __version__
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "trainstack._version.__version__"}


def _tree(tmp_path: Path, chart_version: str, releases: list[dict]) -> Path:
    (tmp_path / "charts/trainstack").mkdir(parents=True)
    (tmp_path / "charts/trainstack/Chart.yaml").write_text(
        f"apiVersion: v2\nname: trainstack\n# the chart's version\nversion: {chart_version}\nappVersion: v2.3.0\n"
        "dependencies:\n  - name: jobset\n    version: 0.12.0\n")
    (tmp_path / "releases.yaml").write_text(yaml.safe_dump({"schemaVersion": 1, "releases": releases}))
    return tmp_path


def test_write_version_writes_the_newest_release_into_the_chart_and_the_package(tmp_path: Path) -> None:
    root = _tree(tmp_path, "0.1.0", [{"version": "0.2.0", "changes": ["Next."]},
                                     {"version": "0.1.0", "commit": "a" * 40, "date": "2026-12-01",
                                      "changes": ["First."]}])
    assert release.write_version(root, check=True) == [release.VERSION_FILE, release.CHART_YAML]
    assert not (root / release.VERSION_FILE).exists()  # check writes nothing
    assert release.write_version(root) == [release.VERSION_FILE, release.CHART_YAML]
    chart = (root / release.CHART_YAML).read_text()
    assert "# the chart's version\nversion: 0.2.0\nappVersion: v2.3.0\n" in chart
    assert "    version: 0.12.0\n" in chart  # a dependency's version is the lock's, not the release's
    namespace: dict = {}
    exec((root / release.VERSION_FILE).read_text(), namespace)  # noqa: S102 - the generated module
    assert namespace["__version__"] == "0.2.0"
    assert release.write_version(root, check=True) == []


def test_a_chart_without_a_version_line_is_one_error(tmp_path: Path) -> None:
    root = _tree(tmp_path, "0.1.0", [{"version": "0.1.0", "changes": ["First."]}])
    (root / release.CHART_YAML).write_text("apiVersion: v2\nname: trainstack\n")
    with pytest.raises(UserError, match="no top-level 'version:' line"):
        release.write_version(root)
