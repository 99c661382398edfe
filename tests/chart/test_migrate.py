"""`trainstack migrate from-upstream`: the handover plan, computed from upstream's pinned chart rendered the
way `helm install` with its defaults would, and from the trainstack chart; bad input without a cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import ROOT
from support.cli import assert_one_line_error, run_cli
from trainstack import helm, migrate, render

NS = "kubeflow-system"


def upstream(*sets: str) -> list[dict]:
    """Upstream's kubeflow-trainer chart (the pinned archive trainstack depends on), release kubeflow-trainer."""
    archive = next((ROOT / "charts/trainstack/charts").glob("kubeflow-trainer-*.tgz"))
    args = ["template", "kubeflow-trainer", str(archive), "--namespace", NS]
    for value in sets:
        args += ["--set", value]
    return migrate.objects(helm.run(args).stdout)


def trainstack(env: str = "dev") -> list[dict]:
    return migrate.objects(helm.run(["template", "trainstack", str(ROOT / "charts/trainstack"), "--namespace", NS,
                                     *render.value_args(env)]).stdout)


def by_step(actions: list[migrate.Action]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for a in actions:
        out.setdefault(a.step, []).append(a.target)
    return out


def runtime(name: str, installer: bool = True) -> dict:
    labels = {migrate.INSTALLER_LABEL: migrate.INSTALLER_VALUE} if installer else {}
    return {"kind": "ClusterTrainingRuntime", "metadata": {"name": name, "labels": labels}}


def trainjob(name: str, runtime_name: str, done: bool) -> dict:
    conditions = [{"type": "Complete", "status": "True"}] if done else []
    return {"kind": "TrainJob", "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"runtimeRef": {"name": runtime_name}}, "status": {"conditions": conditions}}


@pytest.mark.slow
def test_plan_from_upstream_defaults(chart_ready) -> None:
    up, ours = upstream(), trainstack()
    actions = migrate.plan(up, ours, NS, "kubeflow-trainer", [], [])
    steps = by_step(actions)
    assert [a.step for a in actions].index("forget-release") > max(
        i for i, a in enumerate(actions) if a.step in ("keep-crd", "adopt"))
    assert [a.step for a in actions].index("install") < min(i for i, a in enumerate(actions) if a.step == "delete") \
        if "delete" in steps else True
    # The CRDs are kept, never deleted or adopted.
    assert sorted(steps["keep-crd"]) == sorted(f"CustomResourceDefinition/{n}" for n in (
        "clustertrainingruntimes.trainer.kubeflow.org", "trainingruntimes.trainer.kubeflow.org",
        "trainjobs.trainer.kubeflow.org"))
    assert not [t for t in steps.get("delete", []) if t.startswith("CustomResourceDefinition/")]
    # The controller's Service, its webhooks (cluster-wide names: one Trainer per cluster) and JobSet's are adopted.
    for target in (f"Service/{NS}/kubeflow-trainer-controller-manager",
                   "ValidatingWebhookConfiguration/validator.trainer.kubeflow.org",
                   "MutatingWebhookConfiguration/defaulter.trainer.kubeflow.org",
                   f"ConfigMap/{NS}/jobset-controller-config", f"Secret/{NS}/kubeflow-trainer-webhook-cert"):
        assert target in steps["adopt"], target
    # The Deployments' selectors carry the release name (app.kubernetes.io/instance), immutable: they are
    # re-created by the install, deleted right before it (after the release is forgotten), never adopted.
    for target in (f"Deployment/{NS}/kubeflow-trainer-controller-manager", f"Deployment/{NS}/jobset-controller"):
        assert target in steps["replace"] and target not in steps["adopt"], target
    order = [a.step for a in actions]
    assert order.index("forget-release") < order.index("replace") < order.index("install")
    # Every upstream object is either kept, adopted, replaced or deleted: nothing is left owned by nobody.
    planned = set(steps["keep-crd"]) | set(steps["adopt"]) | set(steps["replace"]) | set(steps.get("delete", []))
    assert {str(migrate.ref_of(o, NS)) for o in up} <= planned


@pytest.mark.slow
def test_plan_with_upstream_runtimes_installed(chart_ready) -> None:
    up = upstream("runtimes.defaultEnabled=true")
    installer = [o for o in up if o["kind"] == "Job" or o["metadata"]["name"].endswith("runtimes-installer")]
    assert installer, "upstream renders its runtime installer when runtimes are on"
    ours = trainstack()
    golden = sorted(o["metadata"]["name"] for o in ours if o["kind"] == "ClusterTrainingRuntime")
    (configmap,) = [o for o in up if o["kind"] == "ConfigMap" and "runtimes.yaml" in (o.get("data") or {})]
    theirs = [d["metadata"]["name"] for d in migrate.objects(configmap["data"]["runtimes.yaml"])]
    shared = sorted(set(theirs) & set(golden))
    assert "torch-distributed" in shared  # the SDK's default name exists on both sides
    # The cluster: upstream's installer applied its runtimes (labelled), plus two of its runtimes trainstack
    # does not ship, one still used by a running job, and a team's own runtime.
    installed = [runtime(n) for n in theirs] + [runtime("legacy-used"), runtime("legacy-unused"),
                                                 runtime("team-own", installer=False)]
    jobs = [trainjob("running", "legacy-used", done=False), trainjob("old", "legacy-unused", done=True)]
    actions = migrate.plan(up, ours, NS, "kubeflow-trainer", installed, jobs)
    steps = by_step(actions)
    assert all(f"ClusterTrainingRuntime/{n}" in steps["adopt"] for n in shared)
    assert "ClusterTrainingRuntime/legacy-unused" in steps["delete"]  # only finished jobs use it
    assert steps["keep-runtime"] == ["ClusterTrainingRuntime/legacy-used"]  # an unfinished job uses it
    assert all(f"ClusterTrainingRuntime/{n}" in steps["delete"] for n in set(theirs) - set(golden))
    assert not any("team-own" in t for targets in steps.values() for t in targets)  # not upstream's: untouched
    order = [a.step for a in actions]
    runtime_deletes = [i for i, a in enumerate(actions) if a.step == "delete" and "TrainingRuntime/" in a.target]
    assert runtime_deletes and min(runtime_deletes) > order.index("install")  # only after the golden ones exist
    deleted = set(steps["delete"])
    assert {f"ConfigMap/{NS}/kubeflow-trainer-runtimes-installer"} & deleted or any(
        "runtimes-installer" in t for t in deleted)


@pytest.mark.slow
def test_unreachable_cluster_is_one_line_and_nothing_changes(tmp_path: Path, helm_bin) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\nusers: [{name: u, user: {}}]\n")
    result = run_cli("migrate", "from-upstream", "--release", "kubeflow-trainer", "--kubeconfig", str(kubeconfig),
                     "--dry-run", timeout=120)
    assert_one_line_error(result, "helm list failed")
