"""Teams: what the chart renders per team (namespace, quota, roles, Kueue objects), the one-line
errors of bad team values, and `trainstack team add` editing a values file in place."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import ROOT, docs_of, helm_template

EXAMPLE = ROOT / "examples" / "teams" / "values.yaml"


def _render(*args: str):
    return docs_of(helm_template("-f", str(EXAMPLE), *args).stdout)


APPLIED_KINDS = {"CustomResourceDefinition", "Namespace", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
                 "ServiceAccount", "ResourceQuota", "LimitRange", "ValidatingAdmissionPolicy",
                 "ValidatingAdmissionPolicyBinding", "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding",
                 "ClusterTrainingRuntime", "ResourceFlavor", "ClusterQueue", "LocalQueue"}


@pytest.fixture(scope="module")
def teams_cluster(chart_ready):
    """A local control plane of its own with the teams example applied: CRDs (Trainer, JobSet, Kueue),
    the team namespaces, quotas, roles, bindings, policies and Kueue objects; no controllers (none is
    needed for RBAC, admission policies and the Kueue objects' schemas).

    Not the session's shared bare cluster: test_policies_apiserver installs and deletes the chart's
    policies there first, and kube-apiserver v1.36.3 then denies every TrainJob through the re-created
    paramRef bindings ("no params found", although the params ConfigMap exists) until it restarts
    (docs/upgrading.md, the lifecycle figures); seen in this tier when teams shared that cluster."""
    import os

    from trainstack import tools
    from trainstack.cluster.local import BINARIES, LocalCluster

    missing = [b for b in BINARIES if tools.find(b) is None]
    if missing:
        pytest.fail(f"not installed: {', '.join(missing)}: run 'make setup'")
    docs = _render("--set", "kueue.install=true")
    wanted = [d for d in docs if d["kind"] in APPLIED_KINDS
              or (d["kind"] == "ConfigMap" and d["metadata"]["name"] in ("trainstack-policy-params", "kubeflow-trainer-public"))]
    for d in wanted:  # helm leaves the release namespace to the client
        if d["kind"] in ("Role", "RoleBinding", "ConfigMap", "ServiceAccount") and not d["metadata"].get("namespace"):
            d["metadata"]["namespace"] = "kubeflow-system"
    cluster = LocalCluster(name=f"pytest-teams-{os.getpid()}")
    try:
        cluster.start()
        cluster.kubectl("create", "namespace", "kubeflow-system")
        crds = [d for d in wanted if d["kind"] == "CustomResourceDefinition"]
        cluster.apply(crds, server_side=True)
        cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                        *[f"crd/{c['metadata']['name']}" for c in crds])
        rest = [d for d in wanted if d["kind"] != "CustomResourceDefinition"]
        first = [d for d in rest if d["kind"] in ("Namespace",)]
        cluster.apply(first, server_side=True)
        cluster.apply([d for d in rest if d not in first], server_side=True)
        yield cluster
    finally:
        cluster.stop()


def _wait_for(check, what: str, timeout: float = 60):
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            assert value, f"{what} within {timeout:.0f}s"
            return value
        time.sleep(1)


@pytest.mark.slow
def test_access_matrix_of_team_members_on_a_real_api_server(teams_cluster):
    from trainstack.teams import access_matrix, trainjob_manifest

    kubeconfig = teams_cluster.kubeconfig
    # the policies are enforced once the API server's informers see them: wait for a denial
    probe = yaml.safe_dump(trainjob_manifest("probe", "team-a", "team-a", runtime="jax-distributed"))
    _wait_for(lambda: teams_cluster.kubectl("create", "--dry-run=server", "-f", "-", input_text=probe,
                                            check=False).returncode != 0, "teamAccess enforced")
    for user, groups in (("alice@example.com", ()), ("dana@example.com", ("team-a",))):  # admin as user; edit by group
        rows = access_matrix(kubeconfig, user, "team-a", "team-b", "team-a", groups=groups)
        bad = [r.as_dict() for r in rows if not r.ok]
        assert bad == [], bad
        assert len(rows) > 30
    # the trainer roles are aggregated into the built-in ones: whoever has `edit` in a namespace may train there
    teams_cluster.kubectl("create", "rolebinding", "erin-edit", "--clusterrole=edit", "--user=erin@example.com",
                          "-n", "team-b")
    _wait_for(lambda: teams_cluster.kubectl("auth", "can-i", "create", "trainjobs.trainer.kubeflow.org", "-n", "team-b",
                                            "--as", "erin@example.com", check=False).stdout.strip() == "yes",
              "built-in edit aggregates trainstack-trainer-edit")
    view = teams_cluster.kubectl("auth", "can-i", "create", "trainjobs.trainer.kubeflow.org", "-n", "team-b",
                                 "--as", "frank@example.com", check=False)
    assert view.stdout.strip() == "no"
    # team-b's viewer reads but cannot submit
    rows = {r.what: r for r in access_matrix(kubeconfig, "carol@example.com", "team-b", "team-a", "team-b")}
    assert rows["get trainjobs.trainer.kubeflow.org in team-b"].actual is True
    assert rows["create trainjobs.trainer.kubeflow.org in team-b"].actual is False


@pytest.mark.slow
def test_kueue_objects_are_accepted_by_the_pinned_kueue_crds(teams_cluster):
    queues = teams_cluster.kubectl_json("get", "clusterqueues.kueue.x-k8s.io")["items"]
    assert {q["metadata"]["name"]: q["spec"]["cohortName"] for q in queues} == {"team-a": "trainstack", "team-b": "trainstack"}
    flavor = teams_cluster.kubectl_json("get", "resourceflavors.kueue.x-k8s.io", "trainstack-nvidia")
    assert flavor["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu"
    local = teams_cluster.kubectl_json("get", "localqueues.kueue.x-k8s.io", "-n", "team-a", "team-a")
    assert local["spec"]["clusterQueue"] == "team-a"


@pytest.mark.slow
def test_a_trainjob_without_a_queue_gets_its_teams_queue_and_may_not_name_another(teams_cluster):
    from trainstack.teams import trainjob_manifest

    job = trainjob_manifest("no-queue", "team-a", "team-a")
    del job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]

    def labelled():
        result = teams_cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-",
                                       "--as", "alice@example.com", input_text=yaml.safe_dump(job), check=False)
        return result.returncode == 0 and json.loads(result.stdout)["metadata"]["labels"].get("kueue.x-k8s.io/queue-name")

    assert _wait_for(labelled, "MutatingAdmissionPolicy labels the TrainJob") == "team-a"
    other = trainjob_manifest("other-queue", "team-a", "team-a")
    other["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "team-b"
    result = teams_cluster.kubectl("create", "--dry-run=server", "-f", "-", "--as", "alice@example.com",
                                   input_text=yaml.safe_dump(other), check=False)
    assert result.returncode != 0 and "must name that team and its queue (team-a)" in result.stderr


@pytest.mark.slow
def test_the_kubeflow_sdk_works_as_a_member_in_its_namespace_only(teams_cluster, tmp_path):
    pytest.importorskip("kubeflow.trainer", reason="the Kubeflow SDK (pip install -e '.[train]')")
    from trainstack.teams import member_kubeconfig, sdk_as_member

    pki = teams_cluster.ca_cert.parent
    config = member_kubeconfig(teams_cluster.kubeconfig, pki / "ca.crt", pki / "ca.key", "dana@example.com",
                               ("team-a",), tmp_path / "dana")
    mine = sdk_as_member(config, "team-a")
    assert "error" not in mine, mine
    assert "torch-distributed" in mine["runtimes"] and mine["got"] == mine["job"] and mine["deleted"]
    theirs = sdk_as_member(config, "team-b")
    assert theirs.get("status") == 403, theirs  # RBAC refuses it (the SDK's first call, list_runtimes)
