"""The clusters the tests share, as session fixtures (a pytest plugin: tests/conftest.py registers it).

- `platform`: the chart installed on a local cluster with KWOK nodes, the controllers and webhooks
  running (the suite's first steps, as `trainstack e2e --nodes kwok` installs it), for every test that
  needs an API server with the CRDs, admission, policies and controllers; each test works in its own
  namespace (`namespace`).
- `local_cluster`: the one bare cluster (API server, KWOK pools, no chart), for the tests whose
  assertions need the chart absent: they install the policies, CRDs or controllers they test
  themselves. A module works there through `scratch`, which deletes what the module created
  (CRDs excepted), so that the next module finds the cluster as the session started it.
- `real_platform`: the chart installed on a real node (kubelet + containerd: containers run), with
  monitoring on, for the tests that run workloads in namespaces and need pods that really run.

With pytest-xdist (the integration tier) each worker is a session with clusters of its own.
Each starts on first use only (a run that selects none of their tests starts nothing) and stops at
the end of the session at the latest. The modules using one cluster run one after another, and the
cluster stops as soon as the last of them is done: within one pytest process, a shared cluster is never
running beside the clusters that other tests start and tear down themselves (those check that nothing
of theirs is left; what `make test-e2e` runs in its second process, and why that is safe, is in
tests/e2e/conftest.py).
Tests keep a cluster of their own only where they must: teardown, faults on the control plane,
upgrades, migration, the whole `trainstack e2e` run, gitops (each says so where it starts it).
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import need_binaries
from trainstack import paths
from trainstack.cluster.local import BINARIES, LocalCluster
from trainstack.e2e import base as basemod
from trainstack.e2e import smokejobs as smokemod
from trainstack.e2e import suite as suitemod
from trainstack.e2e.providers.local import REAL_NODE_TOOLS, LocalProvider, controller_binaries

SHARED = ("local_cluster", "platform", "real_platform")
# Training across nodes is what tests/e2e/test_e2e_local.py (`make e2e`'s two nodes) and
# test_node_loss.py check; every other real-node cluster needs only one node, which saves a node's
# start and every image pulled into its own containerd (the torch image alone: about a minute).
ONE_REAL_NODE = 1
PIPELINE_NS = "trainstack-pipeline"  # where test_real_platform runs the pipeline (tracked, so it can register)
_LAST_USERS = pytest.StashKey[dict[str, str]]()
_RELEASE: dict[str, Callable[[], None]] = {}  # shared cluster -> how to stop it now (once)


# -- helpers for tests that start a cluster of their own ---------------------------------------------

def run_first_steps(suite: suitemod.Suite) -> suitemod.Suite:
    """Chart rendered, local cluster up, chart installed, controllers and webhooks ready, runtimes there."""
    for name, fn in suite.plan()[:6]:
        suite.step(name, fn)
    return suite


def fresh_run_dir(name: str) -> Path:
    """An empty run directory for one cluster (short: containerd sockets live under it)."""
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


def restore(cluster: LocalCluster, objects: list[dict[str, Any]]) -> None:
    """Delete what a module put on the shared bare cluster (OBJECTS; CRDs stay: every module applies the
    same pinned ones) and wait until it is gone, namespaces included."""
    docs = [o for o in objects if o and o.get("kind") != "CustomResourceDefinition"]
    if docs:
        cluster.kubectl("delete", "--ignore-not-found", "--wait", "--timeout=150s", "-f", "-",
                        input_text=yaml.safe_dump_all(docs, sort_keys=False), timeout=180)


class Scratch:
    """The shared bare cluster as one module sees it: what the module creates through `apply` and
    `kubectl create namespace` is recorded, and `scratch` deletes it again afterwards."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.made: list[dict[str, Any]] = []

    def apply(self, objects: list[dict[str, Any]], server_side: bool = False) -> None:
        self.made.extend(objects)
        self.cluster.apply(objects, server_side=server_side)

    def kubectl(self, *args: str, **kwargs: Any) -> Any:
        if args[:2] == ("create", "namespace") and len(args) > 2:
            self.made.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": args[2]}})
        return self.cluster.kubectl(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.cluster, name)


@contextmanager
def scratch(cluster: LocalCluster) -> Iterator[Scratch]:
    """`cluster` (the shared bare one) for one module or test; what it made there is deleted afterwards."""
    recorder = Scratch(cluster)
    try:
        yield recorder
    finally:
        restore(cluster, recorder.made)


@contextmanager
def _released_early(name: str, stop: Callable[[], None]) -> Iterator[None]:
    """Register STOP as the way to stop shared cluster NAME before the session ends; stop it at the end
    if nothing did before."""
    done = []

    def once() -> None:
        if not done:
            done.append(True)
            stop()

    _RELEASE[name] = once
    try:
        yield
    finally:
        _RELEASE.pop(name, None)
        once()


# -- the shared clusters ------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def local_cluster() -> Iterator[LocalCluster]:
    """The bare cluster (a CPU and a GPU pool of KWOK nodes, the pinned etcd, kube-apiserver,
    kube-controller-manager, kube-scheduler; no chart), shared by the session."""
    need_binaries(*BINARIES)
    cluster = LocalCluster(name=f"pytest-{os.getpid()}", cert_sans=(f"*.{basemod.NAMESPACE}.svc",))
    with _released_early("local_cluster", cluster.stop):
        cluster.start()
        yield cluster


@pytest.fixture(scope="session")
def platform() -> Iterator[suitemod.Suite]:
    """The chart installed on KWOK nodes with the controllers and webhooks running, shared by the session."""
    need_binaries(*BINARIES, "helm")
    provider = LocalProvider(fresh_run_dir("platform"), nodes="kwok")
    need_binaries(*controller_binaries(smokemod.render("dev", provider.lock), provider.lock))
    with ExitStack() as stack, _released_early("platform", stack.close):
        yield stack.enter_context(installed(provider))


@pytest.fixture
def namespace(platform: suitemod.Suite, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace of this test's own on `platform`, deleted afterwards (not waited for)."""
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"t-{slug}-{uuid.uuid4().hex[:6]}"
    platform.kube.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        platform.kube.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="session")
def real_platform() -> Iterator[suitemod.Suite]:
    """The chart installed as `make e2e` installs it on a real node only (kubelet + containerd:
    containers run), with monitoring on (its metrics Services, scraper ServiceAccount and token) and
    tracking on (MLflow, for the e2e's namespaces and PIPELINE_NS), for the tests that need pods that
    really run: the pipeline, the live metrics scrape, the node daemons' restarts (kubelet and
    containerd come back; the cluster stays as it was)."""
    need_binaries(*BINARIES, *REAL_NODE_TOOLS, "helm")
    provider = LocalProvider(fresh_run_dir("real"), nodes="real", real_nodes=ONE_REAL_NODE, tracking=True,
                             tracked=(PIPELINE_NS,))
    monitoring = provider.run_dir / "values-monitoring.yaml"
    monitoring.write_text("monitoring: {enabled: true}\n")
    node_values = provider.values_files
    provider.values_files = lambda: [*node_values(), monitoring]  # type: ignore[method-assign]
    with ExitStack() as stack, _released_early("real_platform", stack.close):
        yield stack.enter_context(installed(provider))


# -- one cluster's users one after another, and the cluster stopped after the last ---------------------

def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def _group(item: pytest.Item) -> tuple[bool, bool]:
    """An e2e item's group (tests/e2e/conftest.py): its group markers."""
    return (item.get_closest_marker("beside_real_nodes") is not None,
            item.get_closest_marker("real_nodes_2") is not None)


def _uses(item: pytest.Item, name: str) -> bool:
    """Whether ITEM needs shared cluster NAME: as a fixture, or named in its module's USES_CLUSTERS (for
    a fixture that asks for the cluster by name, `request.getfixturevalue`)."""
    module = getattr(item, "module", None)
    return name in getattr(item, "fixturenames", ()) or name in getattr(module, "USES_CLUSTERS", ())


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Move the modules that use a shared cluster next to the first of them (each module's own order
    kept), and note the last module using each."""
    for name in SHARED:
        users = list(dict.fromkeys(_module(i) for i in items if _uses(i, name)))
        e2e = [i for i in items if _uses(i, name) and _module(i).startswith("tests/e2e/")]
        if len({_group(i) for i in e2e}) > 1:
            # make test-e2e's processes would each start it (tests/e2e/conftest.py)
            raise pytest.UsageError(f"shared cluster {name} is used by e2e modules of different groups: "
                                    f"{', '.join(dict.fromkeys(_module(i) for i in e2e))}; give them the same "
                                    "BESIDE_REAL_NODES and REAL_NODE_GROUP")
        if len(users) < 2:
            continue
        moved = [i for i in items if _module(i) in users[1:]]
        rest = [i for i in items if _module(i) not in users[1:]]
        at = max(n for n, i in enumerate(rest) if _module(i) == users[0]) + 1
        items[:] = rest[:at] + moved + rest[at:]
    last: dict[str, str] = {}
    for item in items:
        for name in SHARED:
            if _uses(item, name):
                last[name] = _module(item)
    config.stash[_LAST_USERS] = last


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    """After the last module that uses a shared cluster (its module fixtures torn down), stop the cluster."""
    try:
        return (yield)
    finally:
        if nextitem is None or _module(nextitem) != _module(item):
            for name, module in item.config.stash.get(_LAST_USERS, {}).items():
                if module == _module(item) and name in _RELEASE:
                    _RELEASE[name]()
