"""kubeapi on a real kube-apiserver: waiting by watching sees every change, and ends on time."""

from __future__ import annotations

import time

import pytest

from trainstack import kubeapi
from trainstack.errors import UserError
from trainstack.jsontypes import dig


@pytest.fixture
def kube(platform):
    """The shared platform's cluster (tests/support/clusters.py); each test works in its own `namespace`."""
    return platform.provider.cluster


def test_snapshots_follow_creates_updates_and_deletes_then_end_at_the_timeout(kube, namespace):
    from kubernetes import client as k8s

    ns = namespace
    api = kubeapi.client(kube.kubeconfig)
    core = k8s.CoreV1Api(api)
    seen: list[dict[str, str]] = []
    start = time.monotonic()
    steps = iter([
        lambda: kube.kubectl("create", "configmap", "a", "-n", ns, "--from-literal=k=1"),
        lambda: kube.kubectl("create", "configmap", "b", "-n", ns, "--from-literal=k=1"),
        lambda: kube.kubectl("patch", "configmap", "a", "-n", ns, "-p", '{"data":{"k":"2"}}'),
        lambda: kube.kubectl("delete", "configmap", "b", "-n", ns),
    ])
    pending = None
    for objects in kubeapi.snapshots(api, core.list_namespaced_config_map, timeout=8, tick=2, namespace=ns):
        mine = {name: obj["data"]["k"] for name, obj in objects.items() if name in ("a", "b")}
        if not seen or mine != seen[-1]:
            seen.append(mine)
            pending = next(steps, None)
            if pending:
                pending()
    elapsed = time.monotonic() - start
    # every state the namespace went through, in order, each seen by the watch
    assert seen == [{}, {"a": "1"}, {"a": "1", "b": "1"}, {"a": "2", "b": "1"}, {"a": "2"}], seen
    # the timeout ends the iteration (a quiet namespace still yields every tick until then)
    assert 7 <= elapsed < 30, elapsed


def test_a_label_selector_narrows_the_watch(kube, namespace):
    from kubernetes import client as k8s

    ns = namespace
    api = kubeapi.client(kube.kubeconfig)
    core = k8s.CoreV1Api(api)
    kube.kubectl("create", "configmap", "other", "-n", ns)
    for objects in kubeapi.snapshots(api, core.list_namespaced_config_map, timeout=20, namespace=ns,
                                     label_selector="pick=me"):
        assert "other" not in objects
        if "picked" in objects:
            break
        kube.apply([{"apiVersion": "v1", "kind": "ConfigMap",
                              "metadata": {"name": "picked", "namespace": ns, "labels": {"pick": "me"}}}])
    else:
        pytest.fail("the labelled ConfigMap was never seen")


def test_a_kubeconfig_without_the_context_is_one_line(kube):
    with pytest.raises(UserError) as err:
        kubeapi.client(kube.kubeconfig, context="no-such-context")
    assert "no usable kube context" in err.value.message and "\n" not in err.value.message


def test_wait_for_returns_what_done_says_or_none_at_the_timeout(kube, namespace):
    ns = namespace
    api = kubeapi.for_kube(kube)
    kube.kubectl("create", "configmap", "ready", "-n", ns, "--from-literal=state=done")
    from kubernetes import client as k8s

    listing = k8s.CoreV1Api(api).list_namespaced_config_map
    got = kubeapi.wait_for(api, listing, lambda found: dig(found, "ready", "data", default={}).get("state"), 20,
                           namespace=ns, field_selector="metadata.name=ready")
    assert got == "done"
    start = time.monotonic()
    assert kubeapi.wait_for(api, listing, lambda found: "never" in found, 3, namespace=ns) is None
    assert 2.5 <= time.monotonic() - start < 15


def test_core_objects_lists_and_watches_the_core_group_as_plain_dicts(kube, namespace):
    """core_objects reads /api/v1 as JSON (no typed models): namespaced with selectors, cluster-wide,
    and as a watch."""
    ns = namespace
    api = kubeapi.client(kube.kubeconfig)
    configmaps = kubeapi.core_objects(api, "configmaps", ns)
    kube.apply([{"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": "labelled", "namespace": ns, "labels": {"pick": "me"}},
                          "data": {"k": "v"}}])
    picked = kubeapi.items(api, configmaps, label_selector="pick=me")
    assert [c["metadata"]["name"] for c in picked] == ["labelled"] and picked[0]["data"] == {"k": "v"}
    # a timestamp is the API server's own string, as kubectl shows it
    assert picked[0]["metadata"]["creationTimestamp"].endswith("Z")
    assert kubeapi.named(api, configmaps, "labelled")["metadata"]["labels"] == {"pick": "me"}
    assert kubeapi.named(api, configmaps, "absent") is None
    namespaces = {n["metadata"]["name"] for n in kubeapi.items(api, kubeapi.core_objects(api, "namespaces"))}
    assert {ns, "default", "kube-system"} <= namespaces

    def created(objects: dict) -> bool:
        if "later" not in objects:
            kube.kubectl("create", "configmap", "later", "-n", ns, "--from-literal=k=1", check=False)
            return False
        return objects["later"]["data"] == {"k": "1"}

    assert kubeapi.wait_for(api, configmaps, created, timeout=20)
