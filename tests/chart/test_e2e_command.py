"""`trainstack e2e` without a cluster: arguments, errors, and the pure parts (node pools, configs, env)."""

from __future__ import annotations

import socket

import pytest

from conftest import ROOT, run_cli
from trainstack.e2e import suite as suitemod


@pytest.mark.slow
def test_kind_without_docker_says_so_and_runs_nothing():
    from trainstack.e2e.providers import docker_answers

    if docker_answers()[0]:
        pytest.skip("a Docker engine answers here: the kind path runs in .github/workflows/e2e-kind.yaml")
    result = run_cli("e2e", "--provider", "kind")
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert "kind provider: no Docker engine answers" in last and "nothing was run" in last, last
    assert "Traceback" not in result.stderr
    with socket.socket() as taken:  # a taken port stops the run right after the provider is chosen
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        auto = run_cli("e2e", "--provider", "auto", "--port-base", str(taken.getsockname()[1]))
    assert "provider local (auto: kind not possible (no Docker engine" in auto.stderr, auto.stderr[-500:]
    assert auto.returncode == 1 and "is already in use" in auto.stderr.strip().splitlines()[-1]


def test_data_cache_render_adds_lws_and_the_cache_runtime(chart_ready, lock):
    def names(objects, kind):
        return {(o["metadata"]["name"], o["metadata"].get("namespace")) for o in objects if o.get("kind") == kind}

    plain = suitemod.render("dev", lock)
    cached = suitemod.render("dev", lock, data_cache=True)
    assert "dataCache.enabled=true" in suitemod.value_args("dev", data_cache=True)
    assert suitemod.value_args("dev") == ["-f", str(ROOT / "overlays" / "dev" / "values.yaml")]
    # staging's files as its kustomization lists them: what it shares with prod, then its own
    assert suitemod.value_args("staging") == ["-f", str(ROOT / "overlays" / "shared" / "production.yaml"),
                                              "-f", str(ROOT / "overlays" / "staging" / "values.yaml")]
    assert ("lws-controller-manager", suitemod.NAMESPACE) in names(cached, "Deployment") - names(plain, "Deployment")
    crd = "leaderworkersets.leaderworkerset.x-k8s.io"
    assert (crd, None) in names(cached, "CustomResourceDefinition") - names(plain, "CustomResourceDefinition")
    runtimes = {r["metadata"]["name"] for r in suitemod.golden_runtimes(cached)}
    assert "torch-distributed-with-cache" in runtimes - {r["metadata"]["name"] for r in suitemod.golden_runtimes(plain)}
    sa = ("kubeflow-trainer-cache-initializer", suitemod.SMOKE_NS)
    assert sa in names(cached, "ServiceAccount")
