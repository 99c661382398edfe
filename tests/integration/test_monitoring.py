"""Metrics, alerts and the dashboard, held to the real metrics of the pinned controllers.

Metric names come from the pinned upstream sources (module zips verified against the lock and
the controllers' go.sum); the rules are checked and unit-tested with the pinned promtool; the
chart wires metrics only when asked, and the ServiceMonitors only where the Prometheus Operator is.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from conftest import ROOT
from support.monitoring_render import WITH_KUEUE, alerts, render, rule_groups, run_tool
from trainstack import monitoring, tools

# Tracking on too: its ServiceMonitor and alerts are monitoring's (templates/tracking/).
FORCED = ("--set", "monitoring.enabled=true", "--set", "monitoring.prometheusOperator=always",
          "--set", "tracking.enabled=true")
# The thresholds tests/testdata/monitoring/alerts_test.yaml was written for (its header says the same).
TEST_THRESHOLDS = ("--set", "monitoring.alerts.waitingFor=30m", "--set", "monitoring.alerts.failedPerHour=5",
                   "--set-json", "monitoring.alerts.failedRatio=0.5",
                   "--set", "monitoring.alerts.webhookLatencySeconds=1",
                   "--set-json", "monitoring.alerts.reconcileErrorRatio=0.1",
                   "--set", "monitoring.alerts.certificateExpiryDays=21",
                   "--set", "monitoring.alerts.blackboxJob=blackbox",
                   "--set-json", "monitoring.alerts.trackingErrorRatio=0.05")
ALERTS_TEST = ROOT / "tests" / "testdata" / "monitoring" / "alerts_test.yaml"




@pytest.fixture(scope="module")
def forced(chart_ready) -> list[dict]:
    """Monitoring on with the LWS data cache (and Kueue), so every controller is wired."""
    return render(*FORCED, "--set", "dataCache.enabled=true", *(("--set", "kueue.install=true") if WITH_KUEUE else ()))


@pytest.fixture(scope="module")
def promtool() -> Path:
    found = tools.find("promtool")
    if found is None:
        pytest.fail("promtool is not installed: run 'trainstack tools install promtool' (make setup does)")
    return found


# ----------------------------------------------------------------------------- alerts
def _promtool_files(docs: list[dict], folder: Path) -> Path:
    """The rendered rules as a Prometheus rule file, annotations dropped (promtool compares them
    verbatim; their templates are checked by `promtool check rules`), next to the unit tests."""
    groups = json.loads(json.dumps(rule_groups(docs)))
    for group in groups:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (folder / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    shutil.copy(ALERTS_TEST, folder / ALERTS_TEST.name)
    return folder / ALERTS_TEST.name


@pytest.mark.slow
def test_promtool_checks_the_rendered_rules(promtool, forced, tmp_path):
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": rule_groups(forced)}))
    result = run_tool([str(promtool), "check", "rules", str(rules)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alerts(rule_groups(forced)))} rules found" in result.stdout


@pytest.mark.slow
def test_promtool_unit_tests_fire_and_resolve_every_alert(promtool, chart_ready, tmp_path):
    docs = render(*FORCED, *TEST_THRESHOLDS)
    test_file = _promtool_files(docs, tmp_path)
    result = run_tool([str(promtool), "test", "rules", test_file.name],
                            cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    # The same tests fail when a threshold moves: Pending pods then page after 10 minutes, not 30.
    moved = render(*FORCED, *TEST_THRESHOLDS, "--set", "monitoring.alerts.waitingFor=10m")
    _promtool_files(moved, tmp_path)
    result = run_tool([str(promtool), "test", "rules", test_file.name],
                            cwd=tmp_path)
    assert result.returncode != 0 and "TrainstackTrainJobPodsPending" in result.stdout + result.stderr


@pytest.mark.slow
def test_promtool_parses_every_dashboard_expression(promtool, tmp_path):
    rules = []
    for board in monitoring.chart_dashboards().values():
        for i, expr in enumerate(monitoring.dashboard_exprs(board).values()):
            concrete = (expr.replace("$__rate_interval", "5m").replace("$namespace", ".*")
                        .replace("$blackbox_job", "blackbox"))
            rules.append({"record": f"trainstack:dashboard:{i}", "expr": concrete})
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = run_tool([str(promtool), "check", "rules", str(path)])
    assert result.returncode == 0, result.stdout + result.stderr
