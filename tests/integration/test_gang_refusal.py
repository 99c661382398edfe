"""`scheduling.gang` against live clusters: Helm reads the served APIs from the cluster, and the chart
renders a choice the cluster can honour and refuses, in one line, one it cannot (docs/scheduling.md)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from conftest import need_binaries
from support.helm import dry_run, error_lines
from trainstack import api
from trainstack.cluster.local import BINARIES, LocalCluster

NATIVE_API = f"{api.GANG_GROUP}/{api.GANG_VERSION}/PodGroup"


def test_the_gated_cluster_serves_podgroups_and_the_chart_takes_native_there(platform):
    """On the local cluster (the lock's gates): the API is served, an upgrade to `native` renders, and
    `volcano`, whose API is not there, is refused in one line naming the value and the API."""
    resources = platform.kube.kubectl("api-resources", f"--api-group={api.GANG_GROUP}", "-o", "name").stdout.split()
    assert {"podgroups.scheduling.k8s.io", "workloads.scheduling.k8s.io"} <= set(resources), resources
    kubeconfig = platform.provider.kubeconfig
    native = dry_run(kubeconfig, "upgrade", "--reuse-values", "--set", "scheduling.gang=native")
    assert native.returncode == 0, native.stderr
    volcano = dry_run(kubeconfig, "upgrade", "--reuse-values", "--set", "scheduling.gang=volcano")
    assert volcano.returncode != 0
    assert len(error_lines(volcano)) == 1 and "scheduling.gang=volcano" in error_lines(volcano)[0], volcano.stderr


@pytest.fixture(scope="module")
def ungated(lock) -> Iterator[LocalCluster]:
    """A control plane of its own started from a lock without the gang gates and API (what a 1.36 cluster
    has by default): the shared clusters have them, and this check needs a cluster that lacks them."""
    need_binaries(*BINARIES, "helm")
    cluster = LocalCluster(name=f"pytest-ungated-{os.getpid()}", pools=[], lock=lock.without_gates())
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def test_a_cluster_without_the_gates_gets_the_charts_one_line_refusal(ungated):
    resources = ungated.kubectl("api-resources", f"--api-group={api.GANG_GROUP}", "-o", "name").stdout.split()
    assert "podgroups.scheduling.k8s.io" not in resources, resources
    refused = dry_run(ungated.kubeconfig, "install", "--set", "scheduling.gang=native")
    assert refused.returncode != 0
    errors = error_lines(refused)
    assert len(errors) == 1, refused.stderr
    assert f"scheduling.gang=native: the cluster does not serve {NATIVE_API}" in errors[0], errors[0]
    print(errors[0])
    plain = dry_run(ungated.kubeconfig, "install", "--set", "scheduling.gang=none")
    assert not any("scheduling.gang" in ln for ln in error_lines(plain)), plain.stderr
