"""Metrics, alerts and the dashboard, held to the real metrics of the pinned controllers.

Metric names come from the pinned upstream sources (module zips verified against the lock and
the controllers' go.sum); the rules are checked and unit-tested with the pinned promtool; the
chart wires metrics only when asked, and the ServiceMonitors only where the Prometheus Operator is.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, by_kind, helm_template
from support.cli import run_cli
from support.monitoring_render import WITH_KUEUE, alerts, render, rule_groups, run_tool
from trainstack import monitoring, tools, yamlio
from trainstack.jsontypes import dig

FORCED = ("--set", "monitoring.enabled=true", "--set", "monitoring.prometheusOperator=always")
# The tracking server's ServiceMonitor and alerts (templates/tracking/; its policy: tests/chart/test_tracking.py).
TRACKED = ("--set", "tracking.enabled=true")
ALERTS_TEST = ROOT / "tests" / "testdata" / "monitoring" / "alerts_test.yaml"
OPERATIONS = ROOT / "docs" / "operations.md"
MONITORING_KINDS = ("ServiceMonitor", "PodMonitor", "PrometheusRule", "NetworkPolicy")


WIRED = {"trainer": "kubeflow-trainer-controller-manager", "jobset": "jobset-controller",
         "lws": "lws-controller-manager", **({"kueue": "kueue-controller-manager"} if WITH_KUEUE else {})}


@pytest.fixture(scope="module")
def forced(chart_ready) -> list[dict]:
    """Monitoring on with the LWS data cache (and Kueue), so every controller is wired."""
    return render(*FORCED, "--set", "dataCache.enabled=true", *(("--set", "kueue.install=true") if WITH_KUEUE else ()))


# ----------------------------------------------------------------------------- real metrics (pinned sources)
@pytest.mark.slow
def test_controller_metrics_come_from_the_versions_the_controllers_require(lock):
    for controller, chart in monitoring.CONTROLLERS.items():
        source = lock.chart(chart).source
        info = tools.module_info(source.module, source.version)
        gomod = zipfile.ZipFile(info["Zip"]).read(f"{source.module}@{source.version}/go.mod").decode()
        runtime = re.search(r"sigs\.k8s\.io/controller-runtime (v\S+)", gomod).group(1)
        names = monitoring.controller_metrics(controller, lock)
        assert names["controller_runtime_reconcile_total"].startswith(f"sigs.k8s.io/controller-runtime@{runtime}/")
        assert {"workqueue_depth", "leader_election_master_status", "controller_runtime_webhook_latency_seconds_bucket",
                "process_resident_memory_bytes", "certwatcher_read_certificate_errors_total"} <= set(names), controller
    jobset = monitoring.controller_metrics("jobset", lock)
    assert jobset["jobset_failed_total"] == "sigs.k8s.io/jobset@v0.12.0/pkg/metrics/metrics.go"
    # Trainer v2.3.0 defines no metrics of its own (upstream's kubeflow_trainer_* set is unreleased).
    assert not any(n.startswith("kubeflow_trainer") for n in monitoring.controller_metrics("trainer", lock))


@pytest.mark.slow
def test_every_metric_the_rules_and_the_dashboard_use_is_defined_upstream(forced):
    exprs = monitoring.rule_exprs(rule_groups(forced))
    tracked = monitoring.rule_exprs(rule_groups(render(*FORCED, *TRACKED)))
    assert {"alert TrainstackTrackingDown", "alert TrainstackTrackingErrors"} <= set(tracked)
    exprs.update(tracked)
    for dashboard in monitoring.chart_dashboards().values():
        exprs.update(monitoring.dashboard_exprs(dashboard))
    assert len(exprs) > 20
    assert monitoring.unknown_metrics(exprs) == {}
    # And the check can fail: a metric upstream does not define is reported where it is used.
    assert monitoring.unknown_metrics({"alert X": "rate(kubeflow_trainer_jobs_failed_total[5m]) > 0"}) == {
        "alert X": {"kubeflow_trainer_jobs_failed_total"}}


@pytest.mark.slow
def test_metrics_access_matches_what_each_pinned_binary_supports(lock):
    """docs/operations.md and templates/monitoring/_monitoring.tpl say: JobSet and LWS filter /metrics with
    controller-runtime's authn/authz, Trainer v2.3.0 serves it unauthenticated (NetworkPolicy)."""
    def source_text(chart: str, path: str) -> str:
        source = lock.chart(chart).source
        zip_path = tools.module_info(source.module, source.version)["Zip"]
        return zipfile.ZipFile(zip_path).read(f"{source.module}@{source.version}/{path}").decode()

    assert "FilterProvider: filters.WithAuthenticationAndAuthorization" in source_text("jobset", "main.go")
    assert "FilterProvider: filters.WithAuthenticationAndAuthorization" in source_text("lws", "cmd/main.go")
    if "kueue" in monitoring.pinned_controllers(lock):
        assert "FilterProvider: filters.WithAuthenticationAndAuthorization" in source_text("kueue", "cmd/kueue/main.go")
    trainer = source_text("kubeflow-trainer", "pkg/config/config.go")
    assert "metricsserver.Options{" in trainer and "FilterProvider" not in trainer


# ----------------------------------------------------------------------------- chart wiring
@pytest.mark.slow
def test_monitoring_is_off_by_default(chart_ready):
    docs = render()
    assert not [d for d in docs if d["kind"] in MONITORING_KINDS]
    assert not [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"].startswith("trainstack-")]
    assert "trainstack-metrics-reader" not in by_kind(docs, "ClusterRole")


@pytest.mark.slow
def test_service_monitors_only_where_the_operator_crds_are_served_or_forced(chart_ready):
    on = ("--set", "monitoring.enabled=true")
    auto = render(*on)
    assert {"trainstack-trainer-metrics", "trainstack-jobset-metrics"} <= set(by_kind(auto, "Service"))
    assert not [d for d in auto if d["kind"] in ("ServiceMonitor", "PrometheusRule")]
    served = render(*on, "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor")
    assert set(by_kind(served, "ServiceMonitor")) == {"trainstack-trainer", "trainstack-jobset"}
    assert set(by_kind(served, "PrometheusRule")) == {"trainstack"}
    never = render(*on, "--set", "monitoring.prometheusOperator=never",
                   "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor")
    assert not [d for d in never if d["kind"] in ("ServiceMonitor", "PrometheusRule")]
    bad = helm_template(*on, "--set", "monitoring.prometheusOperator=yes", check=False)
    assert bad.returncode != 0 and "prometheusOperator" in bad.stderr


@pytest.mark.slow
def test_each_metrics_service_selects_exactly_its_controller_on_the_metrics_port(forced):
    deployments = by_kind(forced, "Deployment")
    assert {n for n in by_kind(forced, "Service") if n.endswith("-metrics") and n.startswith("trainstack-")} == {
        f"trainstack-{name}-metrics" for name in WIRED}
    for name, expected in WIRED.items():
        service = by_kind(forced, "Service")[f"trainstack-{name}-metrics"]
        selector = service["spec"]["selector"]
        matched = [d for d, obj in deployments.items()
                   if selector.items() <= obj["spec"]["template"]["metadata"]["labels"].items()]
        assert matched == [expected], name
        ports = {p["containerPort"] for c in deployments[expected]["spec"]["template"]["spec"]["containers"]
                 for p in c.get("ports", [])}
        assert service["spec"]["ports"][0]["targetPort"] in ports | {8443}
        monitor = by_kind(forced, "ServiceMonitor")[f"trainstack-{name}"]
        assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
        assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]


@pytest.mark.slow
def test_network_policies_admit_only_the_monitoring_namespace_to_metrics_and_keep_other_ports_open(forced):
    deployments = by_kind(forced, "Deployment")
    policies = by_kind(forced, "NetworkPolicy")
    assert set(policies) == {f"trainstack-{name}-metrics" for name in WIRED}
    for policy in policies.values():
        selector = policy["spec"]["podSelector"]["matchLabels"]
        [deployment] = [d for d in deployments.values()
                        if selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()]
        metrics_rule, open_rule = policy["spec"]["ingress"]
        monitoring_ns = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
        assert metrics_rule["from"] == [monitoring_ns]
        assert [p["port"] for p in metrics_rule["ports"]] == [8443]
        assert "from" not in open_rule
        # Every other port the controller listens on (webhook, health, status server) stays reachable.
        container_ports = {p["containerPort"] for c in deployment["spec"]["template"]["spec"]["containers"]
                           for p in c.get("ports", [])} - {8443}
        probes = {c[probe]["httpGet"]["port"] for c in deployment["spec"]["template"]["spec"]["containers"]
                  for probe in ("livenessProbe", "readinessProbe") if probe in c}
        named = {p["name"]: p["containerPort"] for c in deployment["spec"]["template"]["spec"]["containers"]
                 for p in c.get("ports", [])}
        probes = {named.get(p, p) for p in probes}
        assert container_ports | probes <= {p["port"] for p in open_rule["ports"]}, deployment["metadata"]["name"]


@pytest.mark.slow
def test_scraper_token_may_read_metrics_and_the_monitors_send_it(forced):
    role = by_kind(forced, "ClusterRole")["trainstack-metrics-reader"]
    assert role["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    binding = by_kind(forced, "ClusterRoleBinding")["trainstack-metrics-reader"]
    scraper = {"kind": "ServiceAccount", "name": "trainstack-metrics-scraper", "namespace": "kubeflow-system"}
    assert scraper in binding["subjects"]
    secret = by_kind(forced, "Secret")["trainstack-metrics-scraper-token"]
    assert secret["type"] == "kubernetes.io/service-account-token"
    assert secret["metadata"]["annotations"]["kubernetes.io/service-account.name"] == "trainstack-metrics-scraper"
    for monitor in by_kind(forced, "ServiceMonitor").values():
        endpoint = monitor["spec"]["endpoints"][0]
        assert endpoint["authorization"]["credentials"] == {"name": "trainstack-metrics-scraper-token", "key": "token"}
        assert endpoint["scheme"] == "https"


@pytest.mark.slow
def test_extra_labels_reach_the_monitors_and_the_rules(chart_ready):
    docs = render(*FORCED, "--set", "monitoring.labels.release=kube-prometheus-stack")
    for doc in docs:
        if doc["kind"] in ("ServiceMonitor", "PrometheusRule"):
            assert doc["metadata"]["labels"]["release"] == "kube-prometheus-stack"


@pytest.mark.slow
def test_rendered_monitoring_objects_pass_trainstack_validate(forced, tmp_path):
    path = tmp_path / "monitoring.yaml"
    path.write_text("".join("---\n" + yaml.safe_dump(d) for d in forced
                            if d["kind"] in ("ServiceMonitor", "PrometheusRule", "NetworkPolicy", "Service", "Secret",
                                             "ClusterRole", "ClusterRoleBinding", "ServiceAccount", "ConfigMap")))
    result = run_cli("validate", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    broken = tmp_path / "broken.yaml"
    extra = "insecureSkipVerify: true\n      skipVerify: true"
    broken.write_text(path.read_text().replace("insecureSkipVerify: true", extra, 1))
    result = run_cli("validate", str(broken))
    assert result.returncode == 1 and "ServiceMonitor" in result.stdout and "skipVerify" in result.stdout


@pytest.mark.slow
def test_the_unit_tests_fire_and_resolve_each_alert(chart_ready):
    shipped = set(alerts(rule_groups(render(*FORCED, *TRACKED))))
    fired, resolved = set(), set()
    for case in yamlio.load(ALERTS_TEST.read_text())["tests"]:
        for check in case["alert_rule_test"]:
            (fired if check.get("exp_alerts") else resolved).add(check["alertname"])
    assert fired == shipped and resolved == shipped


@pytest.mark.slow
def test_every_alert_has_a_summary_a_description_and_a_runbook_section(chart_ready):
    headings = {re.sub(r"[^a-z0-9-]", "", h.lower().replace(" ", "-"))
                for h in re.findall(r"^#{2,4} (.+)$", OPERATIONS.read_text(), re.MULTILINE)}
    for name, rule in alerts(rule_groups(render(*FORCED, *TRACKED))).items():
        notes = rule["annotations"]
        assert len(notes["summary"]) > 20 and len(notes["description"]) > 80, name
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), name
        anchor = notes["runbook"].split("#", 1)[1]
        assert notes["runbook"] == f"docs/operations.md#{name.lower()}" and anchor in headings, name


@pytest.mark.slow
def test_alert_labels_and_thresholds_come_from_values(chart_ready):
    docs = render(*FORCED, "--set", "monitoring.alerts.labels.team=ml-platform",
                  "--set", "monitoring.alerts.waitingFor=2h", "--set", "monitoring.alerts.webhookLatencySeconds=3")
    rules = alerts(rule_groups(docs))
    assert all(r["labels"]["team"] == "ml-platform" for r in rules.values())
    assert rules["TrainstackTrainJobPodsPending"]["for"] == "2h" and rules["TrainstackTrainJobSuspended"]["for"] == "2h"
    assert rules["TrainstackWebhookSlow"]["expr"].rstrip().endswith("> 3")
    assert "TrainstackTrackingDown" not in rules  # tracking off: no tracking alerts
    tracked = alerts(rule_groups(render(*FORCED, *TRACKED, "--set-json", "monitoring.alerts.trackingErrorRatio=0.2")))
    assert tracked["TrainstackTrackingErrors"]["expr"].rstrip().endswith("> 0.2")
    without_jobset = alerts(rule_groups(render(*FORCED, "--set", "jobset.install=false")))
    assert "TrainstackTrainJobsFailing" not in without_jobset
    assert "trainstack-jobset-metrics" not in without_jobset["TrainstackControllerDown"]["expr"]


# ----------------------------------------------------------------------------- dashboard
@pytest.mark.slow
def test_dashboard_json_model(chart_ready):
    boards = monitoring.chart_dashboards()
    assert boards
    for name, board in boards.items():
        variables = {v["name"]: v for v in board["templating"]["list"]}
        assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
        panels = list(board["panels"]) + [p for row in board["panels"] for p in row.get("panels", [])]
        ids = [p["id"] for p in panels]
        assert len(ids) == len(set(ids)), name
        for panel in panels:
            if panel["type"] == "row":
                continue
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert all(t["datasource"]["uid"] == "${datasource}" for t in panel["targets"]), panel["title"]
            assert panel["targets"] and all(t["expr"] for t in panel["targets"]), panel["title"]
            grid = panel["gridPos"]
            assert grid["x"] + grid["w"] <= 24, panel["title"]
        assert board["uid"] and board["title"]


@pytest.mark.slow
def test_dashboard_ships_in_a_configmap_the_grafana_sidecar_finds(chart_ready):
    docs = render("--set", "monitoring.enabled=true", "--set", "monitoring.alerts.blackboxJob=probes")
    cm = by_kind(docs, "ConfigMap")["trainstack-dashboard-trainstack"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    board = json.loads(cm["data"]["trainstack.json"])
    assert board["uid"] == monitoring.chart_dashboards()["trainstack.json"]["uid"]
    [var] = [v for v in board["templating"]["list"] if v["name"] == "blackbox_job"]
    assert var["query"] == "probes"
    off = render("--set", "monitoring.enabled=true", "--set", "monitoring.dashboard.enabled=false")
    assert "trainstack-dashboard-trainstack" not in by_kind(off, "ConfigMap")


DASHCHECK = ROOT / "tests" / "testdata" / "monitoring" / "dashcheck" / "main.go"


def _dashcheck(lock, folder: Path, *paths: Path) -> subprocess.CompletedProcess:
    """Build tests/testdata/monitoring/dashcheck against the pinned Grafana Foundation SDK and run it."""
    source = lock.source("grafana-foundation-sdk")
    monitoring._zip_for(source.module, source.version, source.sum)  # the zip Go builds from, h1-verified
    gomod = f"module trainstack.local/dashcheck\n\ngo 1.21\n\nrequire {source.module} {source.version}\n"
    (folder / "go.mod").write_text(gomod)
    shutil.copy(DASHCHECK, folder / "main.go")
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local", "CGO_ENABLED": "0", "GOWORK": "off"}
    return run_tool(["go", "run", ".", *map(str, paths)], cwd=folder,
                          env=env, timeout=600)


@pytest.mark.slow
def test_dashboards_decode_strictly_with_grafanas_schema_types(lock, tmp_path):
    boards = sorted((ROOT / "charts" / "trainstack" / "dashboards").glob("*.json"))
    result = _dashcheck(lock, tmp_path, *boards)
    assert result.returncode == 0, result.stdout + result.stderr
    assert all(f"{b}: ok (" in result.stdout for b in boards)
    broken = tmp_path / "broken.json"
    board = json.loads(boards[0].read_text())
    board["panels"][1]["gridPoss"] = board["panels"][1].pop("gridPos")
    broken.write_text(json.dumps(board))
    result = _dashcheck(lock, tmp_path, broken)
    assert result.returncode == 1 and "unexpected field 'gridPoss'" in result.stdout


# ----------------------------------------------------------------------------- environments
@pytest.mark.slow
def test_monitoring_on_in_staging_and_prod_only():
    from support.gitops import ENVIRONMENTS, rendered

    for env in ENVIRONMENTS:
        kinds = {d["kind"] for d in rendered(env)}
        on = env in ("staging", "prod")
        assert ({"ServiceMonitor", "PrometheusRule", "NetworkPolicy"} <= kinds) is on, env
        assert (not {"ServiceMonitor", "PrometheusRule", "NetworkPolicy"} & kinds) is (not on), env


@pytest.mark.slow
def test_training_progress_stays_off_in_every_environment():
    """Decision: TrainJobStatus (alpha in Trainer v2.3.0, default off) stays off. It needs the
    status server reachable from every training pod and a token per TrainJob; trainstack ships no
    example that reports through it, so `trainstack status` shows progress only where a user has
    turned it on (status.trainerStatus.progressPercentage)."""
    from support.gitops import ENVIRONMENTS, rendered

    for env in ENVIRONMENTS:
        docs = list(rendered(env))
        config = yamlio.load(by_kind(docs, "ConfigMap")["kubeflow-trainer-config"]["data"]
                                ["controller_manager_config.yaml"])
        assert not dig(config, "featureGates", "TrainJobStatus"), env
        manager = by_kind(docs, "Deployment")["kubeflow-trainer-controller-manager"]
        args = [a for c in manager["spec"]["template"]["spec"]["containers"] for a in c.get("args") or []]
        assert not [a for a in args if "TrainJobStatus=true" in a], env


# ----------------------------------------------------------------------------- live scrape helper
@pytest.mark.slow
def test_verify_scrape_reports_what_a_controller_did_not_serve(chart_ready):
    served = "# TYPE up gauge\nworkqueue_depth{name=\"x\"} 0\nleader_election_master_status{name=\"x\"} 1\n"
    report = monitoring.verify_scrape({"jobset": served})["jobset"]
    assert "workqueue_depth" in report["present"] and "leader_election_master_status" in report["present"]
    assert "jobset_failed_total" in report["missing"]
    assert "controller_runtime_reconcile_total" in report["missing"]
