"""Experiment tracking (`tracking`, docs/tracking.md) as data: what one value does to the rendered objects.
The e2e runs the server on a real node and reads a TrainJob's run back (e2e/tracking.py)."""

from __future__ import annotations

import json

import pytest

from conftest import ROOT, by_kind, docs_of, helm_template
from support.cli import run_cli
from trainstack.jsontypes import dig

pytestmark = pytest.mark.slow

NAME = "trainstack-tracking"
ON = ("--set", "tracking.enabled=true")
TEAMS = ("--set", "teams.team-a.quota.cpu=4", "--set", "teams.team-b.namespace=ml-b",
         "--set", "tracking.namespaces={pipelines}")


def tracking_objects(docs: list[dict]) -> list[dict]:
    return [d for d in docs if dig(d["metadata"], "labels", "app.kubernetes.io/component") == "tracking"]


def render(*args: str) -> list[dict]:
    return docs_of(helm_template(*args).stdout)


def node_env(runtime: dict) -> list[dict]:
    for job in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
        for container in job["template"]["spec"]["template"]["spec"]["containers"]:
            if container["name"] == "node":
                return container.get("env") or []
    raise AssertionError(f"{runtime['metadata']['name']}: no node container")


def test_off_by_default_renders_nothing_and_leaves_the_runtimes_alone(chart_ready):
    docs = render()
    assert tracking_objects(docs) == []
    for runtime in by_kind(docs, "ClusterTrainingRuntime").values():
        assert not [e for e in node_env(runtime) if e["name"].startswith("MLFLOW_")], runtime["metadata"]["name"]


def test_on_renders_one_server_with_its_claim_service_accounts_and_policy(chart_ready):
    docs = tracking_objects(render(*ON))
    ns = by_kind(docs, "Deployment")[NAME]["metadata"]["namespace"]  # the release's
    kinds = sorted(f"{d['kind']}/{d['metadata']['namespace']}" for d in docs)
    assert kinds == sorted([f"{k}/{ns}" for k in ("ConfigMap", "Deployment", "NetworkPolicy", "PersistentVolumeClaim",
                                                  "Role", "RoleBinding", "Service", "Service", "ServiceAccount")])


def test_the_server_runs_the_locks_mlflow_restricted_with_auth_denying_by_default(chart_ready, lock):
    [deploy] = [d for d in render(*ON) if d["kind"] == "Deployment" and d["metadata"]["name"] == NAME]
    spec = deploy["spec"]
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}  # SQLite: one writer
    pod = spec["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    containers = {c["name"]: c for c in pod["initContainers"] + pod["containers"]}
    assert list(containers) == ["admin", "migrate", "server", "accounts", "metrics"]
    for container in containers.values():
        assert container["image"] == lock.image("mlflow").reference()
        assert container["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                                "capabilities": {"drop": ["ALL"]}}
        assert container["resources"]["limits"]["memory"]
    server = containers["server"]
    script = server["command"][-1]
    assert "--app-name basic-auth" in script and "--serve-artifacts" in script
    assert "default_permission = NO_PERMISSIONS" in script
    env = {e["name"]: e for e in server["env"]}
    assert env["BACKEND_STORE_URI"]["value"] == "sqlite:////data/mlflow.db"
    assert env["MLFLOW_AUTH_ADMIN_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "trainstack-tracking-admin",
                                                                             "key": "password"}
    assert env["MLFLOW_BASIC_AUTH_FAIL_CLOSED"]["value"] == "true"
    assert "127.0.0.1:*" in env["MLFLOW_SERVER_ALLOWED_HOSTS"]["value"].split(",")
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert server[probe]["httpGet"] == {"path": "/health", "port": "http"}
    assert containers["migrate"]["command"][-1].startswith("exec python3 -m mlflow db upgrade")
    # the sidecar is ready after its first pass, and no probe runs in it after that
    accounts = containers["accounts"]
    assert accounts["startupProbe"]["exec"]["command"] == ["test", "-f", "/tmp/accounts-ready"]
    assert "readinessProbe" not in accounts and "livenessProbe" not in accounts
    claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v]
    assert claims == [NAME]


def test_every_golden_runtime_points_its_node_container_at_the_server(chart_ready):
    docs = render(*ON)
    ns = by_kind(docs, "Service")[NAME]["metadata"]["namespace"]
    runtimes = by_kind(docs, "ClusterTrainingRuntime")
    assert runtimes
    for name, runtime in runtimes.items():
        env = {e["name"]: e for e in node_env(runtime)}
        assert env["MLFLOW_TRACKING_URI"]["value"] == f"http://trainstack-tracking.{ns}.svc:5000", name
        for key, field in (("MLFLOW_TRACKING_USERNAME", "username"), ("MLFLOW_TRACKING_PASSWORD", "password")):
            # optional: a TrainJob in a namespace without the Secret still starts
            assert env[key]["valueFrom"]["secretKeyRef"] == {"name": NAME, "key": field, "optional": True}, name
        assert env["MLFLOW_EXPERIMENT_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
        assert env["MLFLOW_RUN_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == \
            "metadata.labels['jobset.sigs.k8s.io/jobset-name']"


def test_mpi_runtimes_have_mpirun_pass_the_tracking_env_to_the_ranks_it_starts_over_ssh(chart_ready):
    """mpirun gives a rank it starts on another pod (over ssh) none of the launcher's environment but what
    OMPI_MCA_mca_base_env_list names: on every MPI runtime it names each tracking variable, and only there."""
    runtimes = by_kind(render(*ON), "ClusterTrainingRuntime")
    mpi = {n for n, rt in runtimes.items() if "mpi" in rt["spec"]["mlPolicy"]}
    assert {"deepspeed-distributed", "mlx-distributed"} <= mpi
    for name, runtime in runtimes.items():
        env = {e["name"]: e for e in node_env(runtime)}
        listed = env.get("OMPI_MCA_mca_base_env_list", {}).get("value")
        if name in mpi:
            assert listed and set(listed.split(";")) == {n for n in env if n.startswith("MLFLOW_")}, name
        else:
            assert listed is None, name
    off = by_kind(render(), "ClusterTrainingRuntime")["mlx-distributed"]
    assert "OMPI_MCA_mca_base_env_list" not in {e["name"] for e in node_env(off)}


def test_a_runtimes_own_env_comes_after_the_tracking_env_and_wins(chart_ready):
    docs = render(*ON, "--set", "runtimes.defaults.env[0].name=MLFLOW_TRACKING_URI",
                  "--set", "runtimes.defaults.env[0].value=http://mlflow.example:80")
    runtime = next(iter(by_kind(docs, "ClusterTrainingRuntime").values()))
    uris = [e.get("value") for e in node_env(runtime) if e["name"] == "MLFLOW_TRACKING_URI"]
    assert uris[-1] == "http://mlflow.example:80"


def test_each_team_and_listed_namespace_gets_an_account_role_and_the_network_path(chart_ready):
    docs = render(*ON, *TEAMS)
    namespaces = ["ml-b", "pipelines", "team-a"]
    config = by_kind(docs, "ConfigMap")[NAME]
    assert json.loads(config["data"]["namespaces.json"]) == namespaces
    assert config["data"]["accounts.py"] == (ROOT / "charts/trainstack/files/tracking/accounts.py").read_text()
    release = config["metadata"]["namespace"]
    roles = {d["metadata"]["namespace"]: d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == f"{NAME}-accounts"}
    assert sorted(roles) == sorted([*namespaces, release])
    for namespace, role in roles.items():
        secret = "trainstack-tracking-admin" if namespace == release else NAME
        assert role["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
                                 {"apiGroups": [""], "resources": ["secrets"], "resourceNames": [secret], "verbs": ["get"]}]
    policy = by_kind(docs, "NetworkPolicy")[NAME]["spec"]
    [rule] = policy["ingress"]
    assert rule["from"] == [{"namespaceSelector": {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces}]}}]


def test_the_metrics_sidecar_serves_what_the_server_counts_on_a_service_of_its_own(chart_ready):
    docs = render(*ON, "--set", "tracking.metricsPort=9200")
    pod = by_kind(docs, "Deployment")[NAME]["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}
    server, metrics = containers["server"], containers["metrics"]
    folder = {e["name"]: e["value"] for e in server["env"] if "value" in e}["PROMETHEUS_MULTIPROC_DIR"]
    # the server writes the multiprocess files there (a restart starts them afresh); the sidecar reads them
    assert '--expose-prometheus "$PROMETHEUS_MULTIPROC_DIR"' in server["command"][-1]
    assert 'rm -rf "$PROMETHEUS_MULTIPROC_DIR"' in server["command"][-1]
    assert metrics["command"] == ["python3", "/config/metrics.py"]
    env = {e["name"]: e["value"] for e in metrics["env"]}
    assert env == {"PROMETHEUS_MULTIPROC_DIR": folder, "METRICS_PORT": "9200"}
    assert metrics["ports"] == [{"name": "metrics", "containerPort": 9200, "protocol": "TCP"}]
    shared = {m["name"]: m["mountPath"] for m in server["volumeMounts"]}
    assert {m["name"]: m["mountPath"] for m in metrics["volumeMounts"]}["tmp"] == shared["tmp"]
    assert folder.startswith(shared["tmp"] + "/")
    config = by_kind(docs, "ConfigMap")[NAME]
    assert config["data"]["metrics.py"] == (ROOT / "charts/trainstack/files/tracking/metrics.py").read_text()
    service = by_kind(docs, "Service")[f"{NAME}-metrics"]
    assert service["spec"]["selector"] == by_kind(docs, "Service")[NAME]["spec"]["selector"]
    assert service["spec"]["ports"] == [{"name": "http-metrics", "port": 9200, "targetPort": "metrics", "protocol": "TCP"}]
    assert service["metadata"]["labels"]["trainstack.io/metrics"] == "tracking"
    # no Prometheus Operator: no ServiceMonitor; forced: one, plain HTTP on that Service's port
    assert "ServiceMonitor" not in {d["kind"] for d in docs}
    forced = render(*ON, "--set", "monitoring.enabled=true", "--set", "monitoring.prometheusOperator=always")
    monitor = by_kind(forced, "ServiceMonitor")[NAME]["spec"]
    assert monitor["selector"] == {"matchLabels": {"trainstack.io/metrics": "tracking"}}
    assert monitor["endpoints"] == [{"port": "http-metrics", "path": "/metrics", "scheme": "http", "interval": "30s"}]


def test_only_the_monitoring_namespace_reaches_the_metrics_port_and_only_with_monitoring_on(chart_ready):
    rules = by_kind(render(*ON, *TEAMS), "NetworkPolicy")[NAME]["spec"]["ingress"]
    assert [r["ports"] for r in rules] == [[{"port": "http", "protocol": "TCP"}]]
    on = ("--set", "monitoring.enabled=true", "--set", "monitoring.namespace=prom")
    for extra in (TEAMS, ()):
        rules = by_kind(render(*ON, *on, *extra), "NetworkPolicy")[NAME]["spec"]["ingress"]
        metrics = [r for r in rules if r["ports"] == [{"port": "metrics", "protocol": "TCP"}]]
        assert metrics == [{"ports": [{"port": "metrics", "protocol": "TCP"}],
                            "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "prom"}}}]}]
        # the monitoring namespace gets the metrics port, not the server's
        assert all("prom" not in json.dumps(r["from"]) for r in rules if r is not metrics[0])
        assert len(rules) == (2 if extra else 1)


def test_with_no_tracked_namespace_the_policy_admits_nobody(chart_ready):
    policy = by_kind(render(*ON), "NetworkPolicy")[NAME]["spec"]
    assert policy["ingress"] == []
    policy = by_kind(render(*ON, "--set", "tracking.networkPolicy.enabled=false"), "NetworkPolicy")
    assert NAME not in policy


def test_your_database_and_claim_replace_the_sqlite_files_and_the_charts_claim(chart_ready):
    docs = render(*ON, "--set", "tracking.existingDatabaseSecret=mlflow-db", "--set", "tracking.storage.existingClaim=runs")
    assert "PersistentVolumeClaim" not in {d["kind"] for d in tracking_objects(docs)}
    pod = by_kind(docs, "Deployment")[NAME]["spec"]["template"]["spec"]
    env = {e["name"]: e for e in next(c for c in pod["containers"] if c["name"] == "server")["env"]}
    assert env["BACKEND_STORE_URI"]["valueFrom"]["secretKeyRef"] == {"name": "mlflow-db", "key": "backendStoreUri"}
    assert env["AUTH_DATABASE_URI"]["valueFrom"]["secretKeyRef"] == {"name": "mlflow-db", "key": "authDatabaseUri"}
    assert [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v] == ["runs"]


def test_the_claim_outlives_helm_uninstall_and_argo_cd_pruning(chart_ready):
    claim = by_kind(render(*ON), "PersistentVolumeClaim")[NAME]
    assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert claim["metadata"]["annotations"]["argocd.argoproj.io/sync-options"] == "Prune=false"


def test_a_mirror_serves_the_server_image(chart_ready, lock):
    production = ROOT / "overlays/shared/production.yaml"  # global.imageRegistry: mirror.example.com
    pod = by_kind(render(*ON, "-f", str(production)), "Deployment")[NAME]["spec"]["template"]["spec"]
    image = lock.image("mlflow")
    assert {c["image"] for c in pod["containers"]} == {f"mirror.example.com/{image.repository}:{image.tag}"}


def test_a_bad_tracked_namespace_fails_the_render_naming_the_value(chart_ready):
    result = helm_template(*ON, "--set", "tracking.namespaces={Not_A_Namespace}", check=False)
    assert result.returncode != 0
    assert "/tracking/namespaces/0" in result.stderr and "Not_A_Namespace" in result.stderr


def test_the_rendered_tracking_passes_validate_with_the_policies(chart_ready, tmp_path):
    rendered = tmp_path / "tracking.yaml"
    rendered.write_text(helm_template(*ON, *TEAMS).stdout)
    result = run_cli("validate", str(rendered), "--policies")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
