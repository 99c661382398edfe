"""`trainstack e2e --gitops`: the real Argo CD (pinned, built from its module) syncs the platform from a
git repository of this checkout onto the local cluster's real node. One cluster for the module: the
suite's steps run once, in order (each needs the ones before); each test checks what one step proved,
from the cluster and Argo CD's own status, not from the step's prose.

Needs `make setup-gitops` (Argo CD is not in `make setup`, which `make e2e` needs; `make test` and
`make test-e2e` build it, see docs/gitops.md); without the Argo CD binary the module is skipped, saying so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainstack import lock as lockmod
from trainstack import paths, tools
from trainstack.e2e import argocd as argocdmod
from trainstack.e2e import base as basemod
from trainstack.e2e import gitops as gitopsmod
from trainstack.e2e.providers.local import LocalProvider
from trainstack.errors import UserError

from .conftest import ONE_REAL_NODE, need_binaries

ROOT = Path(__file__).resolve().parents[2]

e2e = pytest.mark.e2e


@pytest.fixture(scope="module")
def gitops() -> Iterator[gitopsmod.GitOpsSuite]:
    # a cluster of its own: Argo CD installs, upgrades and deletes the platform
    if tools.find("argocd") is None:
        pytest.skip("Argo CD is not built: run 'make setup-gitops' (not part of make setup, docs/gitops.md)")
    need_binaries("helm", "kustomize", "registry", "kubelet", "containerd")
    run_dir = paths.cache_dir() / "e2e" / f"pytest-gitops-{os.getpid()}"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    provider = LocalProvider(run_dir, nodes="real", real_nodes=ONE_REAL_NODE)
    suite = gitopsmod.GitOpsSuite(provider, "dev", run_dir)
    try:
        try:
            suite.run()
        except UserError as err:
            suite.failure = err.message  # type: ignore[attr-defined]
        yield suite
    finally:
        suite.stop()
        provider.down(keep=False)
        shutil.rmtree(run_dir, ignore_errors=True)


def passed(suite: gitopsmod.GitOpsSuite, prefix: str) -> basemod.Step:
    step = next((s for s in suite.steps if s.name.startswith(prefix)), None)
    assert step is not None, f"no step {prefix!r}"
    assert step.result == "pass", f"{step.name}: {step.result}: {step.detail or getattr(suite, 'failure', '')}"
    return step


@e2e
def test_applicationset_generates_the_application_for_the_labelled_cluster(gitops):
    passed(gitops, "cluster Secret, repository, AppProject, ApplicationSet")
    assert gitops.app.startswith("trainstack-dev-")


@e2e
def test_application_synced_and_healthy_from_the_published_chart_with_a_stock_repo_server(gitops):
    passed(gitops, "Application Synced and Healthy (published chart, stock repo-server)")
    passed(gitops, "CRDs established")
    passed(gitops, "controllers and webhooks ready")
    passed(gitops, "golden runtimes installed")
    passed(gitops, "policies installed")
    # the ApplicationSet's Application is gone by the end of the run (the cluster's label is removed); what it
    # was generated from is the ApplicationSet's template: plain kustomize of overlays/<env>, no plugin
    appset = gitops.kube.kubectl_json("get", "applicationsets.argoproj.io", "trainstack", "-n", "argocd")
    template = appset["spec"]["template"]["spec"]["source"]
    assert "plugin" not in template and template["path"] == "overlays/{{.env}}", template
    # nothing of trainstack ran in Argo CD: no CMP server among its processes
    assert set(gitops.argocd.procs) == {"redis", *argocdmod.COMPONENTS}, sorted(gitops.argocd.procs)


@e2e
def test_argo_cds_render_is_trainstack_renders(gitops):
    """What the repo-server rendered for the commit (from its cache) equals `trainstack render` of it."""
    passed(gitops, "Argo CD's render is trainstack render's")
    assert gitops.render_diff == []


@e2e
def test_objects_were_applied_in_sync_wave_order(gitops):
    step = passed(gitops, "sync waves in order")
    # every wave of overlays/base was seen, in order
    waves = [int(part.split(":")[0].split()[1]) for part in step.detail.split("; ")]
    assert waves == sorted(waves) and waves[0] == -2 and 3 in waves, step.detail


@e2e
def test_trainer_crds_are_applied_server_side(gitops):
    for name in gitopsmod.TRAINER_CRDS:
        crd = gitops.kube.kubectl_json("get", "crd", name, "--show-managed-fields")
        assert "kubectl.kubernetes.io/last-applied-configuration" not in (crd["metadata"].get("annotations") or {})
        assert any(m.get("manager") == "argocd-controller" and m.get("operation") == "Apply"
                   for m in crd["metadata"]["managedFields"])
    passed(gitops, "Trainer CRDs applied server-side")


@e2e
def test_no_drift_after_two_reconciles(gitops):
    passed(gitops, "no drift after two more reconciles")


@e2e
def test_trainjob_health_progressing_healthy_and_degraded(gitops):
    step = passed(gitops, "TrainJob health from git")
    assert "gitops-ok " in step.detail and "Progressing -> Healthy" in step.detail.split("gitops-fails")[0]
    assert step.detail.split("gitops-fails ")[1].split(";")[0].endswith("Degraded")


@e2e
def test_only_a_commit_to_what_the_render_reads_renders_the_platform_again(gitops):
    """manifest-generate-paths, live: the TrainJobs' commit (outside them) leaves the platform on Argo
    CD's cached manifests; the values commit (inside overlays/<env>) is rendered again."""
    passed(gitops, "TrainJob health from git")
    passed(gitops, "a git commit reaches the cluster")
    assert gitops.renders["outside"] == 0 and gitops.renders["inside"] >= 1, gitops.renders


@e2e
def test_a_commit_changing_a_value_reaches_the_cluster(gitops):
    passed(gitops, "a git commit reaches the cluster")
    before, after = gitops.value_change  # read from the cluster before the commit and after its sync
    assert after == before + 1


@e2e
def test_the_platform_outlives_its_application_and_a_cascading_one_takes_it_over(gitops):
    passed(gitops, "chart published to the cluster's OCI registry")
    passed(gitops, "a cascading Application takes the platform over")


@e2e
def test_deleting_the_application_keeps_crds_and_trainjobs(gitops):
    passed(gitops, "deleting the Application keeps CRDs and TrainJobs")
    names = {t["metadata"]["name"] for t in gitops.kube.kubectl_json("get", "trainjobs", "-n", basemod.SMOKE_NS)["items"]}
    assert {"gitops-ok", "gitops-fails"} <= names
    crds = {c["metadata"]["name"] for c in gitops.kube.kubectl_json("get", "crds")["items"]}
    assert set(gitopsmod.TRAINER_CRDS) <= crds
    assert not gitops.kube.kubectl_json("get", "deployments", "-n", basemod.NAMESPACE)["items"]


# -- without a cluster: how Argo CD is built and what `--gitops` refuses ----------------------------

def test_the_built_argocd_reports_the_pinned_version():
    binary = tools.find("argocd")
    if binary is None:
        pytest.skip("Argo CD is not built: run 'make setup-gitops'")
    out = subprocess.run([str(binary), "version", "--client", "--short"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and lockmod.load(ROOT / "trainstack.lock.yaml").tool("argocd").version in out.stdout
