"""`trainstack tools`: pinned builds into a versioned cache, idempotent, PATH reuse only on a match."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from conftest import ROOT
from support.cli import assert_one_line_error, run_cli


def _fake_binary(folder: Path, name: str, prints: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"#!/bin/sh\necho '{prints}'\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


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


def test_builds_at_once_must_be_one_or_more():
    result = run_cli("tools", "install", "--jobs", "0")
    assert_one_line_error(result, "--jobs 0: give 1 or more")
    assert result.returncode == 2


# -- tools built as their releases are (the link-time settings of each upstream release build) --


def test_a_prometheus_version_placeholder_on_another_version_scheme_is_one_clear_error():
    from trainstack import lock as lockmod
    from trainstack.errors import UserError

    def tool(version: str) -> lockmod.Tool:
        return lockmod.Tool(name="promtool", module="github.com/prometheus/prometheus", version=version,
                            packages={"promtool": "github.com/prometheus/prometheus/cmd/promtool"},
                            ldflags="-X github.com/prometheus/common/version.Version={prometheusVersion}")

    assert tool("v0.305.2").expanded_ldflags() == "-X github.com/prometheus/common/version.Version=3.5.2"
    with pytest.raises(UserError, match=r"tools\.promtool\.ldflags uses \{prometheusVersion\}, but version v3\.16\.0"):
        tool("v3.16.0").expanded_ldflags()


def test_a_kubectl_on_path_is_reused_through_its_own_version_command(tmp_path, lock):
    """kubectl has no --version flag (the servers of its module do): its versionArgs entry is its own."""
    from trainstack import tools

    tool = lock.tool("kubernetes")
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "kubectl"
    # answers only `kubectl version --client`, as the real one does (unknown flags exit 1)
    script.write_text(f'#!/bin/sh\n[ "$1 $2" = "version --client" ] && echo "Client Version: {tool.version}" && exit 0\n'
                      'echo "error: unknown flag: $1" >&2; exit 1\n')
    script.chmod(0o755)
    assert tool.version_args_for("kubectl") == ("version", "--client")
    assert tool.version_args_for("kube-apiserver") == ("--version",)
    assert tools._reports_version(str(script), tool)
    script.write_text('#!/bin/sh\necho "Client Version: v1.30.0"\n')
    assert not tools._reports_version(str(script), tool)


def test_versionargs_for_a_binary_the_tool_does_not_build_is_one_line(tmp_path):
    text = (ROOT / "trainstack.lock.yaml").read_text()
    bad = text.replace("      kubectl: [version, --client]\n", "      kubectl: [version, --client]\n      kubelet: [--version]\n", 1)
    assert bad != text
    path = tmp_path / "trainstack.lock.yaml"
    path.write_text(bad)
    result = run_cli("tools", "list", env={"TRAINSTACK_LOCK": str(path)})
    assert_one_line_error(result, "tools.kubernetes.versionArgs")


def test_a_stamp_is_trusted_only_with_the_recipe_the_lock_builds_today(tmp_path, lock):
    """A cached build whose recipe (ldflags, tags, toolchain...) differs from the lock's, or that
    recorded none, is rebuilt: only its stamp could say how it was built."""
    from trainstack import tools

    tool = lock.tool("kubeconform")
    env = {"TRAINSTACK_CACHE": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    folder = tmp_path / "cache" / "tools" / tool.name / tool.version
    _fake_binary(folder / "bin", "kubeconform", tool.version)
    base = {"module": tool.module, "version": tool.version, "source": "go build",
            "binaries": {"kubeconform": str(folder / "bin" / "kubeconform")}}

    def status(stamp: dict) -> str:
        (folder / tools.STAMP).write_text(json.dumps(stamp))
        rows = json.loads(run_cli("tools", "list", "--output", "json", env=env).stdout)
        return next(r for r in rows if r["binary"] == "kubeconform")["status"]

    assert status({**base, "recipe": tools._recipe(tool)}) == "installed"
    assert status(base) == "missing"  # no recipe recorded
    assert status({**base, "recipe": {**tools._recipe(tool), "ldflags": "-X main.version=dev"}}) == "missing"


def test_commands_that_need_kubectl_take_one_within_the_skew(tmp_path, lock, monkeypatch):
    """A CI runner's kubectl one minor off the pinned Kubernetes does: no command insists on the pinned build."""
    from trainstack import teams, tools
    from trainstack.errors import UserError

    monkeypatch.setenv("TRAINSTACK_CACHE", str(tmp_path / "cache"))  # no pinned kubectl built
    minor = int(lock.kubernetes_version.split(".")[1])
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "kubectl"
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")

    def answers(client_minor: int) -> None:
        version = json.dumps({"clientVersion": {"major": "1", "minor": str(client_minor)}})
        script.write_text(f"#!/bin/sh\ncase \"$*\" in\n  'version --client -o json') echo '{version}';;\n"
                          "  *'auth can-i'*) echo yes;;\n  *) exit 1;;\nesac\n")
        script.chmod(0o755)

    answers(minor - 1)
    assert teams._can_i(tmp_path / "kubeconfig", [], "create", "trainjobs", "team-a")  # the team checks run it
    assert tools.require_kubectl(lock) == script
    answers(minor - 2)  # outside the skew: one line saying what is wanted
    with pytest.raises(UserError, match=r"within one minor"):
        tools.require_kubectl(lock)
    # every caller goes through find_kubectl: nothing asks for the pinned kubectl by name
    callers = [str(p.relative_to(ROOT)) for p in (ROOT / "scripts" / "trainstack").rglob("*.py")
               if 'require("kubectl"' in p.read_text()]
    assert callers == []
