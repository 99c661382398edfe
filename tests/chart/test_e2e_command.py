"""`trainstack e2e` without a cluster: arguments, errors, and the pure parts (node pools, configs, env)."""

from __future__ import annotations

from conftest import ROOT
from trainstack.e2e import base as basemod
from trainstack.e2e import smokejobs as smokemod


def test_data_cache_render_adds_lws_and_the_cache_runtime(chart_ready, lock):
    def names(objects, kind):
        return {(o["metadata"]["name"], o["metadata"].get("namespace")) for o in objects if o.get("kind") == kind}

    plain = smokemod.render("dev", lock)
    cached = smokemod.render("dev", lock, data_cache=True)
    assert "dataCache.enabled=true" in smokemod.value_args("dev", data_cache=True)
    assert smokemod.value_args("dev") == ["-f", str(ROOT / "overlays" / "dev" / "values.yaml")]
    # staging's files as its kustomization lists them: what it shares with prod, then its own
    assert smokemod.value_args("staging") == ["-f", str(ROOT / "overlays" / "staging" / "production.yaml"),
                                              "-f", str(ROOT / "overlays" / "staging" / "values.yaml")]
    assert ("lws-controller-manager", basemod.NAMESPACE) in names(cached, "Deployment") - names(plain, "Deployment")
    crd = "leaderworkersets.leaderworkerset.x-k8s.io"
    assert (crd, None) in names(cached, "CustomResourceDefinition") - names(plain, "CustomResourceDefinition")
    runtimes = {r["metadata"]["name"] for r in smokemod.golden_runtimes(cached)}
    assert "torch-distributed-with-cache" in runtimes - {r["metadata"]["name"] for r in smokemod.golden_runtimes(plain)}
    sa = ("kubeflow-trainer-cache-initializer", basemod.SMOKE_NS)
    assert sa in names(cached, "ServiceAccount")
