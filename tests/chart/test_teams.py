"""Teams: what the chart renders per team (namespace, quota, roles, Kueue objects), the one-line
errors of bad team values, and `trainstack team add` editing a values file in place."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from conftest import ROOT, by_kind, docs_of, helm_template
from support.cli import assert_one_line_error, run_cli
from support.team_values import VALUES
from trainstack import yamlio

EXAMPLE = ROOT / "examples" / "teams" / "values.yaml"


def _render(*args: str):
    return docs_of(helm_template("-f", str(EXAMPLE), *args).stdout)


def _of(docs, kind, namespace=None):
    return {d["metadata"]["name"]: d for d in docs if d.get("kind") == kind
            and (namespace is None or d["metadata"].get("namespace") == namespace)}


@pytest.fixture(scope="module")
def teams_render(chart_ready):
    return _render()


@pytest.mark.slow
def test_each_team_gets_a_restricted_namespace_quota_and_limits(teams_render):
    namespaces = by_kind(teams_render, "Namespace")
    for team in ("team-a", "team-b"):
        labels = namespaces[team]["metadata"]["labels"]
        assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
        assert labels["pod-security.kubernetes.io/enforce-version"] == "v1.36"
        assert labels["trainstack.io/team"] == team
        assert _of(teams_render, "LimitRange", team)["trainstack-team"]["spec"]["limits"][0]["type"] == "Container"
    # team-a may borrow one GPU: its namespace quota holds nominal + borrowed, so admitted pods can start
    assert _of(teams_render, "ResourceQuota", "team-a")["trainstack-team"]["spec"]["hard"] == {
        "requests.cpu": "8", "requests.memory": "64Gi", "requests.nvidia.com/gpu": "2"}
    assert _of(teams_render, "ResourceQuota", "team-b")["trainstack-team"]["spec"]["hard"]["requests.nvidia.com/gpu"] == "1"


@pytest.mark.slow
def test_members_are_bound_to_the_aggregated_trainer_roles(teams_render):
    roles = by_kind(teams_render, "ClusterRole")
    for role, into in (("view", {"view", "edit", "admin"}), ("edit", {"edit", "admin"}), ("admin", {"admin"})):
        labels = roles[f"trainstack-trainer-{role}"]["metadata"]["labels"]
        assert {k.rsplit("-", 1)[1] for k in labels if k.startswith("rbac.authorization.k8s.io/aggregate-to-")} == into
    view_rules = roles["trainstack-trainer-view"]["rules"]
    assert any("pods/log" in r["resources"] and "get" in r["verbs"] for r in view_rules)  # the SDK's get_job_logs
    assert any("events" in r["resources"] for r in view_rules)
    edit = roles["trainstack-trainer-edit"]["rules"]
    assert any("trainjobs" in r["resources"] and {"create", "delete"} <= set(r["verbs"]) for r in edit)
    assert not any("trainingruntimes" in r["resources"] and "create" in r["verbs"] for r in edit)
    assert not any(r["apiGroups"] != ["trainer.kubeflow.org"] and set(r["verbs"]) - {"get", "list", "watch"} for r in edit)
    admin = roles["trainstack-trainer-admin"]["rules"]
    assert any("trainingruntimes" in r["resources"] and "create" in r["verbs"] for r in admin)
    bindings = _of(teams_render, "RoleBinding", "team-a")
    assert bindings["trainstack-team-admin"]["roleRef"]["name"] == "trainstack-trainer-admin"
    assert bindings["trainstack-team-admin"]["subjects"] == [
        {"kind": "User", "name": "alice@example.com", "apiGroup": "rbac.authorization.k8s.io"}]
    assert bindings["trainstack-team-edit"]["subjects"][0]["kind"] == "Group"
    assert _of(teams_render, "RoleBinding", "team-b")["trainstack-team-view"]["subjects"][0]["name"] == "carol@example.com"
    # cluster-scoped runtimes need a ClusterRoleBinding; only the team's members get it
    crb = by_kind(teams_render, "ClusterRoleBinding")["trainstack-team-team-b-runtimes"]
    assert crb["roleRef"]["name"] == "trainstack-trainer-runtime-reader"
    assert {s["name"] for s in crb["subjects"]} == {"bob@example.com", "carol@example.com"}
    assert roles["trainstack-trainer-runtime-reader"]["rules"][0]["resources"] == ["clustertrainingruntimes"]
    # what the SDK reads in the system namespace: upstream already grants it to every authenticated user
    public = _of(teams_render, "RoleBinding")["kubeflow-trainer-public"]
    assert public["subjects"][0]["name"] == "system:authenticated"


@pytest.mark.slow
def test_kueue_flavors_come_from_the_runtime_classes_and_queues_share_a_cohort(teams_render):
    values = yamlio.load((ROOT / "charts" / "trainstack" / "values.yaml").read_text())["runtimes"]
    flavors = by_kind(teams_render, "ResourceFlavor")
    assert flavors["trainstack-nvidia"]["spec"] == {"nodeLabels": values["nvidia"]["nodeSelector"],
                                                    "tolerations": values["nvidia"]["tolerations"]}
    assert flavors["trainstack-cpu"]["spec"] == {}
    queues = by_kind(teams_render, "ClusterQueue")
    assert {q["spec"]["cohortName"] for q in queues.values()} == {"trainstack"}
    gpu_group = queues["team-a"]["spec"]["resourceGroups"][1]
    assert gpu_group["coveredResources"] == ["nvidia.com/gpu"]
    assert gpu_group["flavors"][0]["resources"] == [{"name": "nvidia.com/gpu", "nominalQuota": "1", "borrowingLimit": "1"}]
    assert queues["team-a"]["spec"]["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "team-a"}}
    local = _of(teams_render, "LocalQueue", "team-a")["team-a"]
    assert local["spec"]["clusterQueue"] == "team-a"
    # a GPU runtime selected on another pool moves its flavor with it: one source for labels and taints
    moved = by_kind(_render("--set", "runtimes.nvidia.nodeSelector.pool=h100"), "ResourceFlavor")
    assert moved["trainstack-nvidia"]["spec"]["nodeLabels"] == {**values["nvidia"]["nodeSelector"], "pool": "h100"}
    mutating = by_kind(teams_render, "MutatingAdmissionPolicy")["trainstack-team-queue"]
    assert "namespaceObject.metadata.labels['trainstack.io/team']" in \
        mutating["spec"]["mutations"][0]["applyConfiguration"]["expression"]


TOPOLOGY = ("--set", "teams.kueue.topologyAware=true", "--set", "runtimes.cpu.nodeSelector.trainstack\\.io/pool=cpu")


@pytest.mark.slow
def test_topology_aware_queues_have_one_topology_flavor_per_node_pool(chart_ready):
    """teams.kueue.topologyAware: one Topology (node level), every flavor a topology flavor with its pool's
    labels, and one resource group per ClusterQueue whose flavors are the pools: a GPU pod's CPU, memory and
    GPUs count on its GPU pool (one topology flavor per PodSet, as Kueue requires), the team's CPU and
    memory quota on each pool, its GPU quota and borrowing limit only on its GPU pool."""
    values = yamlio.load((ROOT / "charts" / "trainstack" / "values.yaml").read_text())["runtimes"]
    docs = _render(*TOPOLOGY)
    assert by_kind(docs, "Topology")["trainstack-nodes"]["spec"] == {"levels": [{"nodeLabel": "kubernetes.io/hostname"}]}
    flavors = by_kind(docs, "ResourceFlavor")
    assert flavors["trainstack-cpu"]["spec"] == {"nodeLabels": {"trainstack.io/pool": "cpu"}, "topologyName": "trainstack-nodes"}
    assert flavors["trainstack-nvidia"]["spec"] == {"nodeLabels": values["nvidia"]["nodeSelector"],
                                                    "tolerations": values["nvidia"]["tolerations"],
                                                    "topologyName": "trainstack-nodes"}
    groups = by_kind(docs, "ClusterQueue")["team-a"]["spec"]["resourceGroups"]
    assert groups == [{"coveredResources": ["cpu", "memory", "nvidia.com/gpu"], "flavors": [
        {"name": "trainstack-cpu", "resources": [{"name": "cpu", "nominalQuota": "8"},
                                                 {"name": "memory", "nominalQuota": "64Gi"},
                                                 {"name": "nvidia.com/gpu", "nominalQuota": "0"}]},
        {"name": "trainstack-nvidia", "resources": [{"name": "cpu", "nominalQuota": "8"},
                                                    {"name": "memory", "nominalQuota": "64Gi"},
                                                    {"name": "nvidia.com/gpu", "nominalQuota": "1", "borrowingLimit": "1"}]}]}]
    # off (the default): no Topology, flavors without one
    assert "Topology" not in {d["kind"] for d in _render()}


@pytest.mark.slow
def test_team_runtimes_reach_the_policy_params(teams_render):
    params = by_kind(teams_render, "ConfigMap")["trainstack-policy-params"]["data"]
    assert params["team.team-a.runtimes"] == "torch-distributed,torch-distributed-gpu"
    assert params["team.team-a.ownRuntimes"] == "false"
    assert params["team.team-b.ownRuntimes"] == "true"
    assert set(params["team.team-b.runtimes"].split(",")) == set(params["runtimes"].split(","))


@pytest.mark.slow
def test_data_cache_service_account_in_team_namespaces(chart_ready):
    docs = _render("--set", "dataCache.enabled=true", "--set", "teams.team-b.dataCache=false")
    accounts = {(d["metadata"]["namespace"], d["metadata"]["name"]) for d in docs if d["kind"] == "ServiceAccount"}
    assert ("team-a", "kubeflow-trainer-cache-initializer") in accounts
    assert ("team-b", "kubeflow-trainer-cache-initializer") not in accounts
    binding = _of(docs, "RoleBinding", "team-a")["kubeflow-trainer-cache-initializer"]
    assert binding["roleRef"]["name"] == "kubeflow-trainer-cache-initializer"


@pytest.mark.slow
def test_queue_label_policy_needs_kubernetes_1_36(chart_ready):
    result = helm_template("-f", str(EXAMPLE), "--kube-version", "1.35.0", check=False)
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("Error:")]
    assert result.returncode != 0 and "teams.kueue.defaultQueueLabel: needs MutatingAdmissionPolicy" in errors[0]


@pytest.mark.slow
def test_no_teams_no_team_objects(chart_ready):
    docs = docs_of(helm_template().stdout)
    assert not any(d.get("kind") in ("ResourceQuota", "LimitRange", "LocalQueue", "ClusterQueue", "ResourceFlavor",
                                     "MutatingAdmissionPolicy") for d in docs)


BAD = [
    (["--set", "teams.x.runtimes[0]=nope"], "teams.x.runtimes: \"nope\" is not a runtime this environment installs"),
    (["--set", "teams.x.quota.cpu=lots"], "teams.x.quota.cpu: \"lots\" is not a Kubernetes quantity"),
    (["--set", "teams.x.namespace=shared", "--set", "teams.y.namespace=shared"],
     "teams.y.namespace: \"shared\" is already the namespace of team x"),
    (["--set", "teams.x.members[0].name=system:authenticated"], "teams.x.members[0].name: \"system:authenticated\""),
    (["--set", "teams.x.members[0].name=two words"], "teams.x.members[0].name: \"two words\" is not a valid User subject"),
    (["--set", "teams.x.members[0].name=ci", "--set", "teams.x.members[0].kind=ServiceAccount",
      "--set", "teams.x.members[0].namespace=Bad_NS"], "teams.x.members[0].namespace: \"Bad_NS\""),
    (["--set", "teams.x.namespace=kube-system"], "teams.x.namespace: \"kube-system\" is a system namespace"),
    (["--set", "teams.x.borrowingLimit.nvidia\\.com/gpu=1"], "teams.x.borrowingLimit.nvidia.com/gpu: the team has no quota"),
    (["--set", "teams.kueue.enabled=true", "--set-string", "teams.x.quota.memory=64Gi",
      "--set-string", "teams.x.borrowingLimit.memory=1Ti"], "teams.x.borrowingLimit.memory: write the quota and borrowingLimit"),
    (["--set", "teams.kueue.enabled=true", "--set", "teams.x.quota.cpu=1", "--set", "runtimes.cpu.nodeSelector.pool=cpu"],
     "runtimes.cpu.nodeSelector: with teams.kueue.enabled"),
    (["--set", "teams.kueue.enabled=true", "--set", "teams.kueue.topologyAware=true", "--set", "teams.x.quota.cpu=1"],
     "runtimes.cpu.nodeSelector: teams.kueue.topologyAware needs the labels of the cpu node pool"),
]


@pytest.mark.slow
@pytest.mark.parametrize("args,message", BAD, ids=[b[1].split(":")[0] for b in BAD])
def test_bad_team_values_fail_helm_template_with_one_line(chart_ready, args, message):
    result = helm_template(*args, check=False)
    assert result.returncode != 0
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1 and message in errors[0], result.stderr




@pytest.mark.slow
def test_team_add_writes_one_entry_and_keeps_comments_and_order(chart_ready, values_file):
    result = run_cli("team", "add", "ml-research", "--values", str(values_file), "--gpus", "4", "--cpus", "32",
                     "--memory", "128Gi", "--members", "alice,group:ml-research", "--admins", "bob",
                     "--output", "json")
    assert result.returncode == 0, result.stderr
    text = values_file.read_text()
    assert text.startswith(VALUES)  # nothing before the new entry moved or lost a comment
    added = text[len(VALUES):]
    assert added == ("  ml-research:\n"
                     "    members:\n"
                     "      - {kind: User, name: bob, role: admin}\n"
                     "      - {kind: User, name: alice, role: edit}\n"
                     "      - {kind: Group, name: ml-research, role: edit}\n"
                     "    quota: {cpu: \"32\", memory: 128Gi, nvidia.com/gpu: 4}\n")
    report = json.loads(result.stdout)
    assert report["team"] == "ml-research"
    assert [ln for ln in report["diff"].splitlines() if ln.startswith("+") and not ln.startswith("+++")] == \
        ["+" + ln for ln in added.splitlines()]
    # and the chart renders the result
    docs = docs_of(helm_template("-f", str(values_file)).stdout)
    assert _of(docs, "ResourceQuota", "ml-research")["trainstack-team"]["spec"]["hard"]["requests.nvidia.com/gpu"] == "4"


@pytest.mark.slow
def test_team_add_to_a_file_without_teams_appends_a_section(chart_ready, tmp_path):
    path = tmp_path / "values.yaml"
    shutil.copy(ROOT / "overlays" / "dev" / "values.yaml", path)
    before = path.read_text()
    result = run_cli("team", "add", "vision", "--values", str(path), "--members", "group:vision", "--gpus", "2")
    assert result.returncode == 0, result.stderr
    after = path.read_text()
    assert after.startswith(before)
    assert yamlio.load(after)["teams"] == {"vision": {"members": [{"kind": "Group", "name": "vision", "role": "edit"}],
                                                         "quota": {"nvidia.com/gpu": 2}}}


@pytest.mark.slow
@pytest.mark.parametrize("args,message", [
    (["--memory", "lots"], "teams.new.quota.memory: \"lots\" is not a Kubernetes quantity"),
    (["--runtimes", "nope"], "teams.new.runtimes: \"nope\" is not a runtime"),
    (["--namespace", "existing"], "teams.new.namespace: \"existing\" is already the namespace of team existing"),
    (["--members", "group:system:authenticated"], "teams.new.members[1].name: \"system:authenticated\""),
], ids=["quantity", "runtime", "namespace", "subject"])
def test_team_add_rejects_bad_values_with_one_line_and_writes_nothing(chart_ready, values_file, args, message):
    result = run_cli("team", "add", "new", "--values", str(values_file), "--members", "carol", *args)
    assert_one_line_error(result, message, "teams.new")
    assert values_file.read_text() == VALUES


@pytest.mark.slow
def test_kueue_is_an_optional_pinned_dependency_with_its_trainjob_integration(chart_ready, lock):
    import tarfile

    pin = lock.chart("kueue")
    image = lock.image("kueue-controller")
    assert pin.source.version == f"v{pin.version}" == lock.tool("kueue-controller").version == image.tag
    values = yamlio.load((ROOT / "charts" / "trainstack" / "values.yaml").read_text())["kueue"]
    assert values["install"] is False
    assert values["controllerManager"]["manager"]["image"]["repository"] == f"{image.registry}/{image.repository}"
    assert values["controllerManager"]["manager"]["image"]["tag"] == image.tag
    with tarfile.open(chart_ready / "charts" / f"kueue-{pin.version}.tgz") as archive:
        upstream = yamlio.load(archive.extractfile("kueue/values.yaml").read())
    assert upstream["controllerManager"]["manager"]["image"]["tag"] == image.tag  # the release edit, not `release-0.19`
    assert not any(d["kind"] == "Deployment" and d["metadata"]["name"].startswith("kueue") for d in docs_of(helm_template().stdout))
    docs = docs_of(helm_template("--set", "kueue.install=true").stdout)
    manager = by_kind(docs, "Deployment")["kueue-controller-manager"]
    assert manager["spec"]["template"]["spec"]["containers"][0]["image"] == f"{image.registry}/{image.repository}:{image.tag}"
    config = by_kind(docs, "ConfigMap")["kueue-manager-config"]["data"]["controller_manager_config.yaml"]
    assert "trainer.kubeflow.org/trainjob" in yamlio.load(config)["integrations"]["frameworks"]


def _kueue_config(docs):
    return yamlio.load(by_kind(docs, "ConfigMap")["kueue-manager-config"]["data"]["controller_manager_config.yaml"])


@pytest.mark.slow
def test_installed_kueue_admits_all_or_nothing_and_is_otherwise_upstreams(chart_ready, lock):
    """The installed Kueue runs upstream's default configuration at the pinned version (generated into
    values.yaml from the built Kueue chart) plus waitForPodsReady with blockAdmission, nothing else."""
    from trainstack import kueueconfig

    upstream = yamlio.load(kueueconfig.upstream_default(ROOT, lock))
    assert "waitForPodsReady" not in upstream  # upstream's default leaves blockAdmission off
    deployed = _kueue_config(docs_of(helm_template("--set", "kueue.install=true").stdout))
    assert deployed["waitForPodsReady"] == {
        "timeout": "10m", "blockAdmission": True,
        "requeuingStrategy": {"timestamp": "Eviction", "backoffLimitCount": 5, "backoffBaseSeconds": 60,
                              "backoffMaxSeconds": 3600}}
    assert {k: v for k, v in deployed.items() if k not in ("waitForPodsReady", "internalCertManagement")} == upstream
    assert "trainer.kubeflow.org/trainjob" in deployed["integrations"]["frameworks"]
    assert deployed["internalCertManagement"]["enable"] is True  # the Kueue chart's own addition, kept


NATIVE = ("--set", "scheduling.gang=native", "--api-versions", "scheduling.k8s.io/v1alpha2/PodGroup",
          "--set", "teams.kueue.enabled=true", "--set", "kueue.install=true")


@pytest.mark.slow
def test_a_gang_choice_with_kueue_needs_blocking_admission(chart_ready, tmp_path):
    """scheduling.gang with teams.kueue and the installed Kueue: its configuration must block admission
    until pods are Ready; a configuration without it is refused with one line."""
    assert _kueue_config(docs_of(helm_template(*NATIVE, "-f", str(EXAMPLE)).stdout))["waitForPodsReady"]["blockAdmission"]
    values = yamlio.load((ROOT / "charts" / "trainstack" / "values.yaml").read_text())
    config = yamlio.load(values["kueue"]["managerConfig"]["controllerManagerConfigYaml"])
    config["waitForPodsReady"]["blockAdmission"] = False
    override = tmp_path / "kueue-no-block.yaml"
    override.write_text(yaml.safe_dump({"kueue": {"managerConfig": {"controllerManagerConfigYaml": yaml.safe_dump(config)}}}))
    refused = helm_template(*NATIVE, "-f", str(EXAMPLE), "-f", str(override), check=False)
    errors = [ln for ln in refused.stderr.splitlines() if ln.startswith("Error:")]
    assert refused.returncode != 0 and len(errors) == 1, refused.stderr
    assert ("scheduling.gang=native with teams.kueue: kueue.managerConfig.controllerManagerConfigYaml must set "
            "waitForPodsReady.blockAdmission: true") in errors[0]
    # gangs off, or Kueue not installed by the chart: its configuration is the user's
    assert helm_template("-f", str(EXAMPLE), "-f", str(override), "--set", "kueue.install=true").returncode == 0
    assert helm_template(*NATIVE[:4], "--set", "teams.kueue.enabled=true", "-f", str(EXAMPLE),
                         "-f", str(override)).returncode == 0
