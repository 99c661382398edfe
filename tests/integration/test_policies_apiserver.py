"""The policies on a real API server (the local control plane): the examples' verdicts hold,
denied requests carry the rule's message, and the environment decides deny versus warn."""

from __future__ import annotations

import copy
import time

import pytest
import yaml

from support.clusters import scratch
from support.policy_examples import examples
from trainstack import render

pytestmark = pytest.mark.slow

PLATFORM_KINDS = {"CustomResourceDefinition", "Namespace", "ValidatingAdmissionPolicy",
                  "ValidatingAdmissionPolicyBinding", "ClusterTrainingRuntime"}


def _install_policies(cluster, env: str) -> None:
    objects = render.render_objects(env)
    crds = [o for o in objects if o["kind"] == "CustomResourceDefinition"]
    cluster.apply(crds, server_side=True)
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", *[f"crd/{c['metadata']['name']}" for c in crds])
    cluster.kubectl("create", "namespace", "team-a", check=False)
    wanted = [o for o in objects if o["kind"] in PLATFORM_KINDS - {"CustomResourceDefinition"}
              or (o["kind"] == "ConfigMap" and o["metadata"]["name"] == "trainstack-policy-params")]
    cluster.apply(wanted, server_side=True)


def _dry_run(cluster, obj: dict):
    return cluster.kubectl("create", "--dry-run=server", "-o", "name", "-f", "-",
                           input_text=yaml.safe_dump(obj), check=False)


def _wait_enforced(cluster, probe) -> None:
    """Policies are enforced once the API server's informers see them: poll with a denied example."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        result = _dry_run(cluster, probe.obj)
        if result.returncode != 0 or "Warning" in result.stderr:
            return
        time.sleep(1)
    pytest.fail("the policies were not enforced within 60s")


@pytest.fixture(scope="module")
def local_cluster(local_cluster):
    """The shared bare cluster (tests/support/clusters.py): no chart, so no webhook of the chart answers the dry
    runs and no policy but these is installed; the policies, bindings and namespace are deleted afterwards."""
    with scratch(local_cluster) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def prod_policies(local_cluster):
    _install_policies(local_cluster, "prod")
    denied = [e for e in examples() if e.expect == "denied" and e.obj["kind"] == "TrainJob"]
    _wait_enforced(local_cluster, denied[0])
    return local_cluster


@pytest.mark.parametrize("example", examples(), ids=lambda e: e.id)
def test_prod_api_server_verdict_matches_example(prod_policies, example):
    result = _dry_run(prod_policies, example.obj)
    if example.expect == "allowed":
        assert result.returncode == 0, result.stderr
        assert "Warning" not in result.stderr, result.stderr
    else:
        assert result.returncode != 0, f"{example.id} was admitted"
        assert "ValidatingAdmissionPolicy 'trainstack-" in result.stderr
        assert example.message in result.stderr, result.stderr


def test_dev_warns_where_prod_denies_but_latest_is_denied_everywhere(prod_policies):
    cluster = prod_policies
    dev = [o for o in render.render_objects("dev") if o["kind"] in ("ValidatingAdmissionPolicyBinding", "ConfigMap")
           and (o["kind"] != "ConfigMap" or o["metadata"]["name"] == "trainstack-policy-params")]
    cluster.kubectl("delete", "validatingadmissionpolicybindings", "-l", "app.kubernetes.io/part-of=trainstack")
    cluster.apply(dev, server_side=True)
    by_id = {e.obj["metadata"]["name"]: e for e in examples()}
    too_big = by_id["too-many-nodes"]
    latest_obj = copy.deepcopy(by_id["pinned-image"].obj)
    latest_obj["metadata"]["name"] = "latest-image"
    latest_obj["spec"]["trainer"]["image"] = "mirror.example.com/pytorch/pytorch:latest"
    latest_message = "needs an explicit tag or digest and must not be :latest"
    deadline = time.monotonic() + 60
    while True:  # the API server picks up the new bindings within seconds
        result = _dry_run(cluster, too_big.obj)
        latest = _dry_run(cluster, latest_obj)
        settled = result.returncode == 0 and "Warning" in result.stderr and latest.returncode != 0
        if settled or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert result.returncode == 0, result.stderr
    assert "Warning" in result.stderr and too_big.message in result.stderr
    assert latest.returncode != 0 and latest_message in latest.stderr
