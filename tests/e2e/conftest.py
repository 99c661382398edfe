"""Fixtures for tests that need the local control plane (marker `e2e`).

`local_cluster` is one LocalCluster for the whole session (a CPU and a GPU pool of KWOK nodes,
the pinned etcd/kube-apiserver/kube-controller-manager/kube-scheduler), for any test that needs a
real API server: admission, CEL, policies, server-side dry runs. `platform` is the chart installed
on its own local cluster with the controllers running, for the e2e failure-path tests.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import need_binaries
from trainstack import paths
from trainstack.cluster.local import BINARIES, LocalCluster
from trainstack.e2e import suite as suitemod
from trainstack.e2e.providers.local import REAL_NODE_TOOLS, LocalProvider, controller_binaries


@pytest.fixture(scope="session")
def local_cluster() -> Iterator[LocalCluster]:
    """A running local cluster, shared by the session; stopped (nothing left running) at the end."""
    need_binaries(*BINARIES)
    cluster = LocalCluster(name=f"pytest-{os.getpid()}", cert_sans=(f"*.{suitemod.NAMESPACE}.svc",))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def run_first_steps(suite: suitemod.Suite) -> suitemod.Suite:
    """Chart rendered, local cluster up, chart installed, controllers and webhooks ready, runtimes there."""
    for name, fn in suite.plan()[:6]:
        suite.step(name, fn)
    return suite


def fresh_run_dir(name: str) -> Path:
    """An empty run directory for one test module's cluster (short: containerd sockets live under it)."""
    run_dir = paths.cache_dir() / "e2e" / f"pytest-{name}-{os.getpid()}"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    return run_dir


@contextmanager
def installed(provider: LocalProvider, env: str = "dev") -> Iterator[suitemod.Suite]:
    """The suite's first steps on `provider`'s cluster; everything stopped and removed afterwards."""
    suite = suitemod.Suite(provider, env, provider.run_dir)
    try:
        yield run_first_steps(suite)
    finally:
        provider.down(keep=False)
        shutil.rmtree(provider.run_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def platform() -> Iterator[suitemod.Suite]:
    need_binaries(*BINARIES, "helm")
    provider = LocalProvider(fresh_run_dir("platform"))
    need_binaries(*controller_binaries(suitemod.render("dev", provider.lock), provider.lock))
    with installed(provider) as suite:
        yield suite


@pytest.fixture(scope="module")
def real_platform() -> Iterator[suitemod.Suite]:
    """The chart installed as `make e2e` installs it on a real node only (kubelet + containerd:
    containers run), with monitoring on (its metrics Services, scraper ServiceAccount and token),
    for the tests that need pods that really run: the pipeline, the live metrics scrape."""
    need_binaries(*BINARIES, *REAL_NODE_TOOLS, "helm")
    provider = LocalProvider(fresh_run_dir("real"), nodes="real")
    monitoring = provider.run_dir / "values-monitoring.yaml"
    monitoring.write_text("monitoring: {enabled: true}\n")
    node_values = provider.values_files
    provider.values_files = lambda: [*node_values(), monitoring]  # type: ignore[method-assign]
    with installed(provider) as suite:
        yield suite
