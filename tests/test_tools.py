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
    client_go_minor = re.search(r"^\s*k8s\.io/client-go\s+v0\.(\d+)\.", go_mod, re.MULTILINE).group(1)
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


# -- tools built as their releases are (the link-time settings of each upstream release build) --


def _installed(binary: str) -> Path:
    from trainstack import tools

    found = tools.find(binary)
    if found is None:
        pytest.fail(f"{binary} is not installed: run 'make setup' (make test does it for you)")
    return found


@pytest.mark.slow
@pytest.mark.parametrize("name", ["kind", "kwok", "etcd", "coredns", "lws-controller", "kubernetes"])
def test_tools_with_a_version_command_report_their_pinned_version(name, lock):
    """What `versionArgs` prints is what a PATH copy is trusted by, and what the released binary prints
    (kind, etcd and CoreDNS keep the version in source; kwok and LWS get it at link time as their release
    builds do: LWS built without it printed v0.0.0-main)."""
    from trainstack import tools

    tool = lock.tool(name)
    for binary in tool.packages:
        args = tool.version_args_for(binary)
        assert args, f"{name}: {binary} has no versionArgs"
        assert tools._reports_version(str(_installed(binary)), tool), f"{binary} {args} != {tool.version}"


@pytest.mark.slow
def test_promtool_reports_the_prometheus_release_its_version_file_names(lock):
    """Prometheus' release build (promu) stamps the VERSION file's version; the lock pins the Go module
    (v0.316.0), from which the build derives it."""
    import subprocess

    from trainstack import tools

    tool = lock.tool("promtool")
    release = (Path(tools.module_info(tool.module, tool.version)["Dir"]) / "VERSION").read_text().strip()
    out = subprocess.run([str(_installed("promtool")), "--version"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0].startswith(f"promtool, version {release} "), out.stdout


@pytest.mark.slow
def test_kwokctl_defaults_to_the_kubernetes_release_upstreams_release_build_sets(lock, tmp_path):
    """kwok's release build sets the default Kubernetes version to the first of the module's
    supported_releases.txt (its Makefile's LATEST_KUBE_RELEASE); kwokctl's defaults show it."""
    import subprocess

    import yaml

    from trainstack import tools

    tool = lock.tool("kwok")
    module_dir = Path(tools.module_info(tool.module, tool.version)["Dir"])
    latest = (module_dir / "supported_releases.txt").read_text().split()[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith("KWOK_")}
    out = subprocess.run([str(_installed("kwokctl")), "config", "view"], capture_output=True, text=True, timeout=30,
                         env={**env, "HOME": str(tmp_path)}, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    config = next(d for d in yaml.safe_load_all(out.stdout) if d and d.get("kind") == "KwokctlConfiguration")
    options = config["options"]
    assert options["kubeVersion"] == f"v{latest}"
    assert options["kwokVersion"] == tool.version


@pytest.mark.slow
@pytest.mark.parametrize("binary", ["jobset-controller", "kueue-controller"])
def test_controllers_start_with_the_version_their_release_images_report(binary, lock, tmp_path):
    """JobSet and Kueue have no version command: they log it as they start (Kueue also as the git_version of
    its kueue_build_info metric). Each run here stops by itself before it serves anything: JobSet on a
    missing --config (after reading a kubeconfig it never connects with), Kueue on a missing kubeconfig."""
    import json
    import subprocess

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: none\n"
        "clusters: [{name: none, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: none, user: {token: none}}]\n"
        "contexts: [{name: none, context: {cluster: none, user: none}}]\n")
    args = {"jobset-controller": [f"--kubeconfig={kubeconfig}", f"--config={tmp_path / 'missing.yaml'}"],
            "kueue-controller": [f"--kubeconfig={tmp_path / 'missing-kubeconfig'}"]}[binary]
    out = subprocess.run([str(_installed(binary)), *args, "--zap-encoder=json"], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "HOME": str(tmp_path)}, cwd=tmp_path)
    assert out.returncode != 0, "expected the probe run to stop before serving"
    records = [json.loads(line) for line in (out.stdout + out.stderr).splitlines() if line.startswith("{")]
    start = next((r for r in records if r.get("msg") == "Initializing"), None)
    assert start is not None, out.stderr[-2000:]
    assert start["gitVersion"] == lock.tool_for_binary(binary).version


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
