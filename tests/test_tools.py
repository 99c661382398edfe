"""`trainstack tools`: pinned builds into a versioned cache, idempotent, PATH reuse only on a match."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from conftest import ROOT, assert_one_line_error, run_cli


def _fake_binary(folder: Path, name: str, prints: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"#!/bin/sh\necho '{prints}'\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.mark.slow
def test_install_twice_does_no_work_the_second_time(tmp_path):
    env = {"TRAINSTACK_CACHE": str(tmp_path / "cache")}
    first = run_cli("tools", "install", "kubeconform", env=env)
    assert first.returncode == 0, first.stderr
    assert "built" in first.stderr
    binary = tmp_path / "cache/tools/kubeconform/v0.8.0/bin/kubeconform"
    assert binary.is_file()
    mtime = binary.stat().st_mtime_ns
    second = run_cli("tools", "install", "kubeconform", env=env)
    assert second.returncode == 0, second.stderr
    assert "up to date" in second.stderr and "nothing to do" in second.stderr
    assert "building" not in second.stderr
    assert binary.stat().st_mtime_ns == mtime
    listed = json.loads(run_cli("tools", "list", "--output", "json", env=env).stdout)
    row = next(r for r in listed if r["binary"] == "kubeconform")
    assert row["status"] == "installed" and row["path"] == str(binary)


def test_binary_on_path_is_reused_only_when_its_version_matches(tmp_path):
    good, bad = tmp_path / "good", tmp_path / "bad"
    _fake_binary(good, "kubeconform", "v0.8.0")
    _fake_binary(bad, "kubeconform", "v0.7.0")
    base = {"TRAINSTACK_CACHE": str(tmp_path / "cache")}
    rows = json.loads(run_cli("tools", "list", "--output", "json",
                              env={**base, "PATH": f"{bad}{os.pathsep}{os.environ['PATH']}"}).stdout)
    assert next(r for r in rows if r["binary"] == "kubeconform")["status"] == "missing"
    env = {**base, "PATH": f"{good}{os.pathsep}{os.environ['PATH']}"}
    result = run_cli("tools", "install", "kubeconform", env=env)
    assert result.returncode == 0, result.stderr
    assert "reused from PATH" in result.stderr
    rows = json.loads(run_cli("tools", "list", "--output", "json", env=env).stdout)
    assert next(r for r in rows if r["binary"] == "kubeconform")["path"] == str(good / "kubeconform")


def test_cache_is_outside_the_repository():
    from trainstack import paths

    assert not paths.cache_dir().is_relative_to(ROOT)


def test_unknown_tool_is_one_clear_line(tmp_path):
    result = run_cli("tools", "install", "nosuchtool", env={"TRAINSTACK_CACHE": str(tmp_path)})
    assert_one_line_error(result, "missing lock entry 'tools.nosuchtool'")


def test_unknown_flag_is_usage_error():
    result = run_cli("tools", "install", "--bogus")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("name", ["helm", "helm3"])
def test_helm_builds_default_to_their_client_gos_kubernetes_as_the_released_binaries_do(name, lock, tmp_path):
    """Without a cluster (`helm template`, GitOps renders) helm assumes a Kubernetes version: the
    released binaries assume the one their client-go is (helm's Makefile sets it at link time), so
    the chart's kubeVersion passes with no --kube-version. A build without it assumed v1.20."""
    import re

    from trainstack import helm, tools

    tool = lock.tool(name)
    go_mod = Path(tools.module_info(tool.module, tool.version)["GoMod"]).read_text()
    client_go_minor = re.search(r"^\s*k8s\.io/client-go\s+v0\.(\d+)\.", go_mod, re.M).group(1)
    chart = tmp_path / "probe"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: probe\nversion: 0.1.0\n")
    (chart / "templates" / "kube.yaml").write_text("kubeVersion: {{ .Capabilities.KubeVersion.Version }}\n")
    rendered = helm.run(["template", str(chart)], binary=name).stdout
    assert f"kubeVersion: v1.{client_go_minor}." in rendered, rendered
    trainstack = helm.run(["template", "t", str(ROOT / "charts" / "trainstack"), "--namespace", "kubeflow-system"],
                          binary=name, check=False)
    assert trainstack.returncode == 0, trainstack.stderr


def test_the_chart_tier_is_helm_and_kustomize_and_the_default_install_leaves_out_gitops(lock):
    """`make setup-chart` (render, validate, docs) builds only the chart tier; `make setup` every
    tool but a tier of its own (Argo CD: `make setup-gitops`)."""
    from trainstack import tools

    chart = {t.name for t in tools.selected(None, lock, tier="chart")}
    assert chart == {"helm", "helm3", "kustomize"}
    default = {t.name for t in tools.selected(None, lock)}
    assert chart < default and "kubernetes" in default - chart
    assert not {t.name for t in lock.tools() if t.tier == "gitops"} & default
    assert {t.name for t in tools.selected(["kwok"], lock)} == {"kwok"}


def test_an_unknown_tier_is_one_line():
    assert_one_line_error(run_cli("tools", "install", "--tier", "nope"), "--tier nope: no such tier (tiers: bench, chart, gitops)")
