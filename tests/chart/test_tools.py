"""`trainstack tools`: pinned builds into a versioned cache, idempotent, PATH reuse only on a match."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import ROOT


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


def test_the_readmes_helm_install_finds_the_pinned_helm_in_the_venv(lock):
    """README: `make setup-chart`, then `helm install ...` with the venv's bin on PATH (activated, or
    .venv/bin/helm): setting up puts the pinned chart tools there."""
    import subprocess
    import sys

    from conftest import run_cli

    result = run_cli("tools", "install", "--tier", "chart")  # what `make setup-chart` runs
    assert result.returncode == 0, result.stderr
    venv_bin = Path(sys.prefix) / "bin"
    for name, args in (("helm", ["version", "--short"]), ("helm3", ["version", "--short"]),
                       ("kustomize", ["version"])):
        version = lock.tool_for_binary(name).version
        out = subprocess.run([str(venv_bin / name), *args], capture_output=True, text=True, check=True).stdout
        assert out.strip().startswith(version), (name, out)
