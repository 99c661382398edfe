"""kubeapi.for_kube without a cluster: which kubeconfig it reads, and when it makes a new client."""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

import yaml

from trainstack import kubeapi


def _kubeconfig(path, server: str) -> None:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))


def test_for_kube_reads_kubeconfig_env_when_given_none_and_renews_after_a_rewrite(tmp_path, monkeypatch):
    path = tmp_path / "config"
    _kubeconfig(path, "https://127.0.0.1:6443")
    monkeypatch.setenv("KUBECONFIG", str(path))
    kube = SimpleNamespace(kubeconfig=None, context=None)  # the existing provider without --kubeconfig
    api = kubeapi.for_kube(kube)
    assert api.configuration.host == "https://127.0.0.1:6443"
    assert kubeapi.for_kube(kube) is api
    named = SimpleNamespace(kubeconfig=path, context="c")
    first = kubeapi.for_kube(named)
    assert kubeapi.for_kube(named) is first
    _kubeconfig(path, "https://127.0.0.1:7443")  # a cluster started again at the same path
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 1_000_000))
    renewed = kubeapi.for_kube(named)
    assert renewed is not first and renewed.configuration.host == "https://127.0.0.1:7443"
