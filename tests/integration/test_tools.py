"""`trainstack tools`: pinned builds into a versioned cache, idempotent, PATH reuse only on a match."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from support.cli import run_cli


@pytest.mark.slow
def test_install_twice_does_no_work_the_second_time(tmp_path):
    env = {"TRAINSTACK_CACHE": str(tmp_path / "cache")}
    # two tools, built side by side (tools.BUILD_JOBS)
    first = run_cli("tools", "install", "kubeconform", "crane", env=env)
    assert first.returncode == 0, first.stderr
    assert first.stderr.count("  done: building ") == 2, first.stderr
    binary = tmp_path / "cache/tools/kubeconform/v0.8.0/bin/kubeconform"
    assert binary.is_file() and (tmp_path / "cache/tools/crane").is_dir()
    assert [r["status"] for r in json.loads(run_cli("tools", "list", "--output", "json", env=env).stdout)
            if r["binary"] in ("kubeconform", "crane")] == ["installed", "installed"]
    mtime = binary.stat().st_mtime_ns
    second = run_cli("tools", "install", "kubeconform", env=env)
    assert second.returncode == 0, second.stderr
    assert "up to date" in second.stderr and "nothing to do" in second.stderr
    assert "building" not in second.stderr
    assert binary.stat().st_mtime_ns == mtime
    listed = json.loads(run_cli("tools", "list", "--output", "json", env=env).stdout)
    row = next(r for r in listed if r["binary"] == "kubeconform")
    assert row["status"] == "installed" and row["path"] == str(binary)


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

    from trainstack import tools, yamlio

    tool = lock.tool("kwok")
    module_dir = Path(tools.module_info(tool.module, tool.version)["Dir"])
    latest = (module_dir / "supported_releases.txt").read_text().split()[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith("KWOK_")}
    out = subprocess.run([str(_installed("kwokctl")), "config", "view"], capture_output=True, text=True, timeout=30,
                         env={**env, "HOME": str(tmp_path)}, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    config = next(d for d in yamlio.load_all(out.stdout) if d and d.get("kind") == "KwokctlConfiguration")
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
