"""Fixtures of the validate tests: the schema catalog, and a real kube-apiserver as the reference."""

from __future__ import annotations

import shutil

import pytest
import yaml

from conftest import need_binaries  # the root conftest (pytest loads it first)
from support.apiserver import ApiServer
from support.corpus import GADGET_CRD, NAMESPACE


@pytest.fixture(scope="session")
def catalog():
    """The cached schema catalog (built on first use from the pinned module zips and charts)."""
    from trainstack.validate import schemas

    return schemas.load()


@pytest.fixture(scope="session")
def apiserver(catalog):
    """etcd + kube-apiserver on 127.0.0.1 with the pinned CRDs and the corpus namespace installed.

    Not the shared clusters of tests/support/clusters.py: this server is the reference validate's verdicts are
    compared with, so it answers with nothing but the API server itself: no chart (its webhooks and
    policies would refuse corpus objects for reasons validate does not claim to check), no
    ServiceAccount admission and no controllers (a Pod's verdict must not depend on whether a
    controller has made its namespace's account yet), every pinned CRD (Trainer, JobSet, LWS, Argo CD,
    Prometheus Operator: more than any shared cluster carries, each created once, as pinned) and the
    corpus's own policies only. It is two processes, started in seconds, with no nodes."""
    from trainstack import lock as lockmod
    from trainstack.validate import crds

    server = ApiServer(*need_binaries("etcd", "kube-apiserver", "kubectl"))
    try:
        server.start()
        found = crds.pinned_crds(lockmod.load())
        server.install("".join("---\n" + yaml.safe_dump({k: v for k, v in crd.items() if k != "status"})
                               for _, crd in found))
        server.install(GADGET_CRD)
        server.install(f"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NAMESPACE}\n", wait_crds=False)
        yield server
    finally:
        server.stop()
        shutil.rmtree(server.dir, ignore_errors=True)
