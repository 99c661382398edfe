"""The per-environment overlays: each builds with the pinned tools, `trainstack render` gives the
same objects as plain kustomize, the result validates, and environments differ exactly as
intended (HA, PDBs, enforcement, registry, labels, GPU runtimes, mirror)."""

from __future__ import annotations

import copy
import json
import shutil

import pytest

from conftest import ROOT, by_kind, docs_of, helm_template
from support.cli import assert_one_line_error, run_cli
from support.gitops import ENVIRONMENTS, MIRROR, canonical, cluster_scoped, group_kind, plain_kustomize, rendered
from trainstack import yamlio
from trainstack.jsontypes import dig

pytestmark = pytest.mark.slow

HA_ENVS = {"staging", "prod"}
GPU_RUNTIMES = {"torch-distributed-gpu", "jax-distributed-gpu", "deepspeed-distributed", "deepspeed-distributed-gpu",
                "mlx-distributed", "torchtune-llama3.2-1b", "torchtune-llama3.2-3b", "torchtune-qwen2.5-1.5b"}
CONTROLLERS = {"kubeflow-trainer-controller-manager", "jobset-controller"}


def objects(env: str, kind: str) -> dict[str, dict]:
    return by_kind(list(rendered(env)), kind)


def ids(env: str) -> set[tuple[str, str]]:
    return {(d["kind"], d["metadata"]["name"]) for d in rendered(env)}


def containers(obj: dict) -> list[dict]:
    """Every container (and init container) of a Deployment or a ClusterTrainingRuntime."""
    if obj["kind"] == "Deployment":
        specs = [obj["spec"]["template"]["spec"]]
    else:
        specs = [rj["template"]["spec"]["template"]["spec"]
                 for rj in obj["spec"]["template"]["spec"]["replicatedJobs"]]
    return [c for s in specs for c in s.get("containers", []) + s.get("initContainers", [])]


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_render_equals_plain_kustomize_of_the_published_chart(env, chart_ready, lock, tmp_path):
    """What Argo CD (or a user) gets from plain `kustomize build --enable-helm overlays/ENV`, with the chart
    the kustomization names pulled from the registry (here: the packaged archive, unpacked where `helm pull
    --untar` puts it), for the cluster's Kubernetes release, is what render prints."""
    shutil.copytree(ROOT / "overlays", tmp_path / "overlays")
    assert canonical(plain_kustomize(tmp_path, env, lock)) == canonical(rendered(env))


def test_every_environment_names_the_published_chart_of_this_release(chart_ready):
    from trainstack import release

    for env in ENVIRONMENTS:
        chart = yamlio.load((ROOT / "overlays" / env / "kustomization.yaml").read_text())["helmCharts"][0]
        assert (chart["repo"], chart["version"]) == (release.chart_repository(ROOT), release.current_version(ROOT))
        # every values file it reads is in its folder (Argo CD's kustomize reads nothing outside it)
        for name in [chart["valuesFile"], *chart.get("additionalValuesFiles", [])]:
            assert "/" not in name and (ROOT / "overlays" / env / name).is_file()


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_render_passes_trainstack_validate(env, chart_ready):
    result = run_cli("validate", "--env", env, "--output", "json")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert report["summary"]["errors"] == 0, report["findings"]
    assert report["summary"]["documents"] == len(rendered(env))


def values_of(path: str) -> dict:
    return yamlio.load((ROOT / "overlays" / path).read_text()) or {}


def identity(doc: dict) -> tuple[str, str, str]:
    return (doc["kind"], doc["metadata"].get("namespace", ""), doc["metadata"]["name"])


def without_env_label(doc: dict) -> dict:
    doc = copy.deepcopy(doc)
    doc["metadata"]["labels"].pop("trainstack.io/environment")
    return doc


def test_staging_and_prod_renders_differ_exactly_as_their_own_values_say():
    """Everything that differs between the staging and prod renders comes from what prod's (and
    staging's) own values.yaml set: the required-labels rule, the controllers' resources and
    prod's teams. Nothing else differs, so the shared file reaches both the same way."""
    staging_own, prod_own = values_of("staging/values.yaml"), values_of("prod/values.yaml")
    staging = {identity(d): without_env_label(d) for d in rendered("staging")}
    prod = {identity(d): without_env_label(d) for d in rendered("prod")}
    teams = set(prod_own["teams"])
    assert teams and "teams" not in staging_own

    # objects only prod has: its teams' and the required-labels rule's
    team_objects = {k for k, d in prod.items() if d["metadata"]["labels"].get("trainstack.io/team") in teams}
    assert {k[2] for k in team_objects if k[0] == "Namespace"} == teams
    assert prod_own["policies"]["rules"]["requiredLabels"]["enabled"] is True
    labels_rule = {("ValidatingAdmissionPolicy", "", "trainstack-required-labels"),
                   ("ValidatingAdmissionPolicyBinding", "", "trainstack-required-labels")}
    # and, tracking being on in both, the tracking server's Role and RoleBinding in each team's namespace
    tracked = {k for k in prod if k[0] in ("Role", "RoleBinding") and k[2] == "trainstack-tracking-accounts"
               and k[1] != "kubeflow-system"}
    assert {k[1] for k in tracked} == teams
    # and, with teams, the Trainer's status server admitting only them (tests/chart/test_team_isolation.py)
    status_server = {("NetworkPolicy", "kubeflow-system", "trainstack-trainer-status-server")}
    assert set(prod) - set(staging) == team_objects | labels_rule | tracked | status_server
    assert set(staging) - set(prod) == set()

    # objects both have, differing: the two controllers (resources only) and the teams' policy params
    differ = {k for k in set(staging) & set(prod) if staging[k] != prod[k]}
    trainer = ("Deployment", "kubeflow-system", "kubeflow-trainer-controller-manager")
    jobset = ("Deployment", "kubeflow-system", "jobset-controller")
    params = ("ConfigMap", "kubeflow-system", "trainstack-policy-params")
    # the tracking server's list of tracked namespaces (prod's teams), its pod's checksum of that list, and
    # its NetworkPolicy, which admits them
    tracking = {(kind, "kubeflow-system", "trainstack-tracking") for kind in ("ConfigMap", "Deployment", "NetworkPolicy")}
    # and the Trainer's metrics policy, which leaves the status server (10443) to the teams' policy
    trainer_metrics = ("NetworkPolicy", "kubeflow-system", "trainstack-trainer-metrics")
    assert differ == {trainer, jobset, params, trainer_metrics} | tracking
    listed = {env: json.loads(objs[("ConfigMap", "kubeflow-system", "trainstack-tracking")]["data"]["namespaces.json"])
              for env, objs in (("staging", staging), ("prod", prod))}
    assert listed == {"staging": [], "prod": sorted(teams)}
    pods = {env: copy.deepcopy(objs[("Deployment", "kubeflow-system", "trainstack-tracking")]["spec"]["template"])
            for env, objs in (("staging", staging), ("prod", prod))}
    for pod in pods.values():
        pod["metadata"]["annotations"].pop("checksum/config")
    assert pods["staging"] == pods["prod"]
    for key, values in ((trainer, ("kubeflow-trainer", "manager")), (jobset, ("jobset", "controller"))):
        resources = {}
        for env, objs, own in (("staging", staging, staging_own), ("prod", prod, prod_own)):
            container = objs[key]["spec"]["template"]["spec"]["containers"][0]
            want = own[values[0]][values[1]]["resources"]
            for part in ("requests", "limits"):  # what the env sets, on top of the chart's (JobSet's cpu limit)
                assert want[part].items() <= container["resources"][part].items(), (env, key, part)
            resources[env] = container.pop("resources")
        assert resources["staging"] != resources["prod"] and staging[key] == prod[key], key
    changed = {k for k in set(staging[params]["data"]) | set(prod[params]["data"])
               if staging[params]["data"].get(k) != prod[params]["data"].get(k)}
    assert changed and {k.split(".")[1] for k in changed} == teams and all(k.startswith("team.") for k in changed)


def test_staging_and_prod_both_render_what_the_shared_file_says():
    shared = values_of("shared/production.yaml")
    settings = {"kubeflow-trainer-controller-manager": shared["kubeflow-trainer"]["manager"],
                "jobset-controller": shared["jobset"]["controller"]}
    mirror = shared["global"]["imageRegistry"]
    for env in sorted(HA_ENVS):
        deployments = objects(env, "Deployment")
        for name, values in settings.items():
            spec = deployments[name]["spec"]
            assert spec["replicas"] == values["replicas"] == 2, (env, name)
            assert spec["template"]["spec"]["affinity"] == values["affinity"], (env, name)
        assert set(objects(env, "PodDisruptionBudget")) == {"kubeflow-trainer-controller-manager",
                                                           "jobset-controller-pdb"}
        owners = [o for kind in ("Deployment", "ClusterTrainingRuntime") for o in objects(env, kind).values()]
        assert all(c["image"].startswith(mirror + "/") for o in owners for c in containers(o)), env
        bindings = objects(env, "ValidatingAdmissionPolicyBinding")
        assert "trainstack-image-registry" in bindings
        assert {tuple(b["spec"]["validationActions"]) for b in bindings.values()} == {
            tuple(shared["policies"]["validationActions"])}
        params = objects(env, "ConfigMap")["trainstack-policy-params"]["data"]
        assert params["allowedRegistries"] == ",".join(shared["policies"]["params"]["allowedRegistries"]) == MIRROR
        assert shared["monitoring"]["enabled"] and {"trainstack-trainer", "trainstack-jobset"} <= set(
            objects(env, "ServiceMonitor"))


def test_team_add_writes_the_envs_own_values_and_checks_them_with_the_shared_file(chart_ready, tmp_path):
    """`trainstack team add --env prod` (in a copy of the checkout) writes prod's own values.yaml only,
    and its render check uses prod's whole list: a bad setting in the shared file stops it."""
    root = tmp_path / "checkout"
    root.mkdir()
    shutil.copy(ROOT / "trainstack.lock.yaml", root / "trainstack.lock.yaml")
    (root / "charts").symlink_to(ROOT / "charts")
    shutil.copytree(ROOT / "overlays", root / "overlays", ignore=shutil.ignore_patterns("argocd"))
    # prod reads the shared settings from its copy (make generate writes it from overlays/shared/)
    shared, own = root / "overlays" / "prod" / "production.yaml", root / "overlays" / "prod" / "values.yaml"
    before = {p: p.read_text() for p in (root / "overlays").rglob("*.yaml")}
    args = ("team", "add", "vision", "--env", "prod", "--members", "group:vision", "--gpus", "2")
    result = run_cli(*args, env={"TRAINSTACK_ROOT": str(root)})
    assert result.returncode == 0, result.stderr
    changed = [p for p, text in before.items() if p.read_text() != text]
    assert changed == [own] and "vision" in yamlio.load(own.read_text())["teams"]

    own.write_text(before[own])
    shared.write_text(before[shared].replace("    replicas: 2\n", "    replicas: many\n", 1))
    result = run_cli(*args, env={"TRAINSTACK_ROOT": str(root)})
    assert_one_line_error(result, "overlays/prod/values.yaml", "nothing was written")
    assert own.read_text() == before[own]


def test_objects_added_or_removed_per_environment_are_the_intended_ones():
    dev = ids("dev")
    pdbs = {("PodDisruptionBudget", "kubeflow-trainer-controller-manager"),
            ("PodDisruptionBudget", "jobset-controller-pdb")}
    registry = {("ValidatingAdmissionPolicy", "trainstack-image-registry"),
                ("ValidatingAdmissionPolicyBinding", "trainstack-image-registry")}
    labels = {("ValidatingAdmissionPolicy", "trainstack-required-labels"),
              ("ValidatingAdmissionPolicyBinding", "trainstack-required-labels")}
    # Monitoring (tests/chart/test_monitoring.py checks the objects themselves).
    monitoring = {(kind, f"trainstack-{c}-metrics") for kind in ("Service", "NetworkPolicy") for c in ("trainer", "jobset")}
    monitoring |= {("ServiceMonitor", "trainstack-trainer"), ("ServiceMonitor", "trainstack-jobset"),
                   ("PrometheusRule", "trainstack"), ("ConfigMap", "trainstack-dashboard-trainstack"),
                   ("ClusterRole", "trainstack-metrics-reader"), ("ClusterRoleBinding", "trainstack-metrics-reader"),
                   ("ServiceAccount", "trainstack-metrics-scraper"), ("Secret", "trainstack-metrics-scraper-token")}
    # Tracking on your PostgreSQL (tests/chart/test_tracking.py checks the objects themselves).
    tracking = {(d["kind"], d["metadata"]["name"]) for d in rendered("staging")
                if d["metadata"]["labels"].get("app.kubernetes.io/component") == "tracking"}
    tracking |= {("ServiceMonitor", "trainstack-tracking")}  # monitoring's, with tracking on
    assert {("Deployment", "trainstack-tracking"), ("PersistentVolumeClaim", "trainstack-tracking"),
            ("NetworkPolicy", "trainstack-tracking")} <= tracking
    assert ids("staging") - dev == pdbs | registry | monitoring | tracking and dev - ids("staging") == set()
    # prod's example teams (its own overlays/prod/values.yaml; tests/chart/test_teams.py checks the objects themselves)
    teams = {(d["kind"], d["metadata"]["name"]) for d in rendered("prod") if "trainstack.io/team" in d["metadata"]["labels"]}
    assert ("Namespace", "team-a") in teams and ("ResourceQuota", "trainstack-team") in teams
    teams |= {("NetworkPolicy", "trainstack-trainer-status-server")}  # the status server only to the teams
    assert ids("prod") - dev == pdbs | registry | labels | monitoring | tracking | teams and dev - ids("prod") == set()
    assert ids("cpu-only") - dev == set()
    assert dev - ids("cpu-only") == {("ClusterTrainingRuntime", name) for name in GPU_RUNTIMES}


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_every_object_carries_the_environment_label(env):
    for doc in rendered(env):
        assert doc["metadata"]["labels"]["trainstack.io/environment"] == env, (doc["kind"], doc["metadata"]["name"])


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_namespaced_objects_are_in_kubeflow_system_and_cluster_objects_have_no_namespace(env):
    """kubectl apply of a render puts nothing in the current namespace (the base Component
    namespaces the two upstream Trainer objects Helm alone would have namespaced)."""
    scoped = cluster_scoped(env)
    team_namespaces = {d["metadata"]["name"] for d in rendered(env)
                       if d["kind"] == "Namespace" and "trainstack.io/team" in d["metadata"]["labels"]}
    for doc in rendered(env):
        namespace = doc["metadata"].get("namespace")
        if group_kind(doc) in scoped:
            assert namespace is None, (doc["kind"], doc["metadata"]["name"])
        elif "trainstack.io/team" in doc["metadata"]["labels"]:  # a team's objects live in its namespace
            assert namespace in team_namespaces, (doc["kind"], doc["metadata"]["name"])
        elif doc["kind"] in ("Role", "RoleBinding") and doc["metadata"]["name"] == "trainstack-tracking-accounts":
            # the tracking server writes each tracked namespace's credential there (docs/tracking.md)
            assert namespace in team_namespaces | {"kubeflow-system"}, (doc["kind"], namespace)
        else:
            assert namespace == "kubeflow-system", (doc["kind"], doc["metadata"]["name"])


def test_ha_replicas_only_in_staging_and_prod():
    for env in ENVIRONMENTS:
        # (the tracking server is one replica everywhere: its artifacts are on one ReadWriteOnce claim)
        replicas = {name: d["spec"]["replicas"] for name, d in objects(env, "Deployment").items()
                    if name != "trainstack-tracking"}
        want = 2 if env in HA_ENVS else 1
        assert replicas == {name: want for name in CONTROLLERS}, env


def test_pdbs_only_in_staging_and_prod_and_they_select_the_controller_pods():
    for env in ENVIRONMENTS:
        pdbs = objects(env, "PodDisruptionBudget")
        if env not in HA_ENVS:
            assert pdbs == {}, env
            continue
        assert set(pdbs) == {"kubeflow-trainer-controller-manager", "jobset-controller-pdb"}
        deployments = objects(env, "Deployment")
        for pdb in pdbs.values():
            assert pdb["spec"]["minAvailable"] == 1
            selector = pdb["spec"]["selector"]["matchLabels"]
            selected = [name for name, d in deployments.items()
                        if selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()]
            assert len(selected) == 1, (pdb["metadata"]["name"], selected)
        trainer = pdbs["kubeflow-trainer-controller-manager"]["spec"]["selector"]["matchLabels"]
        assert trainer == {"app.kubernetes.io/name": "kubeflow-trainer", "app.kubernetes.io/instance": "trainstack",
                           "app.kubernetes.io/component": "manager"}


def test_ha_replicas_prefer_different_nodes():
    for env in HA_ENVS:
        for name, deployment in objects(env, "Deployment").items():
            if name == "trainstack-tracking":  # one replica (test_ha_replicas_only_in_staging_and_prod)
                continue
            anti = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
            term = anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
            assert term["topologyKey"] == "kubernetes.io/hostname"
            pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
            assert term["labelSelector"]["matchLabels"].items() <= pod_labels.items(), (env, name)


def test_controller_resources_grow_from_dev_to_prod():
    from trainstack.quantity import parse as quantity

    sizes = {}
    for env in ENVIRONMENTS:
        for name, deployment in objects(env, "Deployment").items():
            resources = deployment["spec"]["template"]["spec"]["containers"][0]["resources"]
            sizes[env, name] = (quantity(resources["requests"]["cpu"]), quantity(resources["requests"]["memory"]),
                                quantity(resources["limits"]["memory"]))
    for name in CONTROLLERS:
        dev, staging, prod = sizes["dev", name], sizes["staging", name], sizes["prod", name]
        assert all(d < s <= p for d, s, p in zip(dev, staging, prod)), (name, dev, staging, prod)
        assert all(d < p for d, p in zip(dev, prod)), name


def test_policies_deny_except_in_dev():
    for env in ENVIRONMENTS:
        for name, binding in objects(env, "ValidatingAdmissionPolicyBinding").items():
            actions = binding["spec"]["validationActions"]
            if env == "dev" and name != "trainstack-image-tag":
                assert actions == ["Warn", "Audit"], (env, name)
            else:
                assert actions == ["Deny"], (env, name)


def test_registry_rule_only_in_staging_and_prod_and_it_allows_only_the_mirror():
    for env in ENVIRONMENTS:
        bindings = objects(env, "ValidatingAdmissionPolicyBinding")
        params = objects(env, "ConfigMap")["trainstack-policy-params"]["data"]
        if env in HA_ENVS:
            assert "trainstack-image-registry" in bindings
            assert params["allowedRegistries"] == MIRROR
        else:
            assert "trainstack-image-registry" not in bindings
            assert MIRROR not in params["allowedRegistries"]


def test_required_labels_only_in_prod():
    for env in ENVIRONMENTS:
        assert ("trainstack-required-labels" in objects(env, "ValidatingAdmissionPolicyBinding")) == (env == "prod")


def test_cpu_only_has_no_gpu_runtime_and_denies_gpus():
    for env in ENVIRONMENTS:
        runtimes = objects(env, "ClusterTrainingRuntime")
        params = objects(env, "ConfigMap")["trainstack-policy-params"]["data"]
        gpu_limits = [name for name, rt in runtimes.items() for c in containers(rt)
                      if any(k.endswith("/gpu") for k in (c.get("resources", {}).get("limits") or {}))]
        if env == "cpu-only":
            assert gpu_limits == [] and not set(runtimes) & GPU_RUNTIMES
            assert params["gpuRuntimes"] == "" and params["maxGpusPerNode"] == "0"
        else:
            assert GPU_RUNTIMES <= set(runtimes) and set(gpu_limits) == GPU_RUNTIMES, env
            assert params["maxGpusPerNode"] != "0"


def test_torch_distributed_in_every_environment():
    for env in ENVIRONMENTS:
        assert "torch-distributed" in objects(env, "ClusterTrainingRuntime"), env


def test_mirror_registry_images_only_in_staging_and_prod():
    for env in ENVIRONMENTS:
        owners = [obj for kind in ("Deployment", "ClusterTrainingRuntime") for obj in objects(env, kind).values()]
        assert all(containers(obj) for obj in owners), env
        images = [c["image"] for obj in owners for c in containers(obj)]
        mirrored = [image.startswith(MIRROR + "/") for image in images]
        assert all(mirrored) if env in HA_ENVS else not any(mirrored), (env, images)


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_base_component_protects_crds_and_certificates(env):
    for name, crd in objects(env, "CustomResourceDefinition").items():
        options = set(crd["metadata"]["annotations"]["argocd.argoproj.io/sync-options"].split(","))
        assert {"Prune=false", "Delete=false", "ServerSideApply=true"} <= options, name
    secrets = objects(env, "Secret")
    # JobSet 0.12.0's chart ships empty cert data; re-applying it would blank the live certificates.
    assert "data" not in secrets["jobset-webhook-server-cert"]
    assert not any("data" in s or "stringData" in s for s in secrets.values())


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_sync_waves_put_crds_first_and_runtimes_and_policies_after_the_controllers(env):
    def wave(doc: dict) -> int:
        return int(dig(doc["metadata"], "annotations", "argocd.argoproj.io/sync-wave", default="0"))

    waves: dict[str, set[int]] = {}
    for doc in rendered(env):
        waves.setdefault(doc["kind"], set()).add(wave(doc))
    assert waves.pop("Namespace") == {-2}
    assert waves.pop("CustomResourceDefinition") == {-1}
    assert waves.pop("ValidatingAdmissionPolicy") == {1}
    assert waves.pop("ValidatingAdmissionPolicyBinding") == {2}
    assert waves.pop("ClusterTrainingRuntime") == {3}
    params = objects(env, "ConfigMap")["trainstack-policy-params"]
    assert wave(params) == 1
    # Controllers, their webhooks, certificates and RBAC land together in wave 0: the
    # certificate rotators inject the caBundle into the webhook configurations before the
    # controllers report ready, so the configurations must not wait for a later wave.
    for kind in ("Deployment", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "Secret",
                 "ServiceAccount", "ClusterRole", "Service"):
        assert waves.pop(kind) == {0}, kind
    assert all(w <= {0, 1} for w in waves.values()), waves


# ----------------------------------------------------------------------------- the chart's PDB value
def test_trainer_pdb_is_off_by_default(chart_ready):
    assert "PodDisruptionBudget" not in {d["kind"] for d in docs_of(helm_template().stdout)}


def test_trainer_pdb_max_unavailable_wins_over_min_available(chart_ready):
    docs = docs_of(helm_template("--set", "kubeflow-trainer.manager.podDisruptionBudget.enabled=true",
                                 "--set", "kubeflow-trainer.manager.podDisruptionBudget.maxUnavailable=50%").stdout)
    pdb = by_kind(docs, "PodDisruptionBudget")["kubeflow-trainer-controller-manager"]
    assert pdb["spec"]["maxUnavailable"] == "50%" and "minAvailable" not in pdb["spec"]
    assert pdb["metadata"]["namespace"] == "kubeflow-system"


def test_trainer_pdb_value_is_schema_checked(chart_ready):
    misspelt = helm_template("--set", "kubeflow-trainer.manager.podDisruptionBudget.enabeld=true", check=False)
    assert misspelt.returncode != 0 and "enabeld" in misspelt.stderr
    wrong = helm_template("--set", "kubeflow-trainer.manager.podDisruptionBudget.minAvailable=most", check=False)
    assert wrong.returncode != 0 and "minAvailable" in wrong.stderr


def test_render_is_for_the_locks_release_or_the_one_asked_for(lock):
    """render passes the release to helm (--helm-kube-version): what depends on the cluster's version, here the team
    namespaces' Pod Security version, follows the lock's release, or a tested one's (validate --kube-version,
    make test-matrix), not the version helm was built with."""
    from trainstack import lock as lockmod
    from trainstack import render

    def psa_versions(objects):
        return {o["metadata"]["labels"]["pod-security.kubernetes.io/enforce-version"] for o in objects
                if o.get("kind") == "Namespace" and "trainstack.io/team" in o["metadata"].get("labels", {})}

    oldest = lock.kubernetes_matrix()[0]
    assert psa_versions(render.render_objects("prod", lock)) == {f"v{lockmod.minor_of(lock.kubernetes_version)}"}
    assert psa_versions(render.render_objects("prod", lock.for_kubernetes(oldest))) == {f"v{lockmod.minor_of(oldest)}"}
