"""`trainstack status` without a cluster: TrainJob states, ages, the summary, bad contexts.
(On a real API server with 1,000 TrainJobs: tests/integration/test_status_scale.py.)"""

from __future__ import annotations

from datetime import UTC, datetime

from conftest import assert_one_line_error, run_cli
from trainstack import status


def tj(conditions=(), suspend=False, jobs=(), **extra):
    return {"spec": {"suspend": suspend, "runtimeRef": {"name": "torch-distributed"}},
            "status": {"conditions": [{"type": t, "status": s} for t, s in conditions], "jobsStatus": list(jobs),
                       **extra}}


def test_trainjob_state_follows_conditions_then_suspend_then_jobs():
    assert status.trainjob_state(tj([("Failed", "True")], jobs=[{"active": 1}])) == "Failed"
    assert status.trainjob_state(tj([("Complete", "True")])) == "Complete"
    assert status.trainjob_state(tj([("Suspended", "True")])) == "Suspended"
    assert status.trainjob_state(tj(suspend=True)) == "Suspended"
    running = tj([("Suspended", "False")], jobs=[{"name": "node", "active": 2, "ready": 2}])
    assert status.trainjob_state(running) == "Running"
    assert status.trainjob_state(tj(jobs=[{"name": "node", "active": 0, "ready": 0}])) == "Pending"
    assert status.trainjob_state({"metadata": {}, "spec": {}}) == "Pending"


def test_summary_counts_states_per_namespace_and_the_oldest_active_job():
    rows = [status.TrainJobRow("a", "x", "Running", "rt", 100), status.TrainJobRow("a", "y", "Failed", "rt", 9000),
            status.TrainJobRow("a", "z", "Pending", "rt", 300), status.TrainJobRow("b", "w", "Complete", "rt", 5)]
    summary = status.Status("ctx", "kubeflow-system", trainjobs=rows).summary()
    assert summary == [
        {"namespace": "a", "Pending": 1, "Running": 1, "Suspended": 0, "Complete": 0, "Failed": 1,
         "oldest_active_s": 300},
        {"namespace": "b", "Pending": 0, "Running": 0, "Suspended": 0, "Complete": 1, "Failed": 0,
         "oldest_active_s": 0}]


def test_ages_read_like_kubectl():
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    assert status._age("2026-12-01T11:59:18Z", now) == 42
    ages = (42, 420, 3 * 3600 + 720, 2 * 86400 + 5 * 3600)
    assert [status.human_age(s) for s in ages] == ["42s", "7m", "3h12m", "2d5h"]


def test_no_kube_context_is_one_line(tmp_path):
    missing = tmp_path / "nope"
    assert_one_line_error(run_cli("status", "--kubeconfig", str(missing)), "no usable kube context", str(missing))
    config = tmp_path / "config"
    config.write_text("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
                      "users: [{name: u, user: {token: t}}]\ncontexts: [{name: here, context: {cluster: c, user: u}}]\n"
                      "current-context: here\n")
    assert_one_line_error(run_cli("status", "--kubeconfig", str(config), "--context", "there"), "kube context 'there'")
    unreachable = run_cli("status", "--kubeconfig", str(config), "-A")
    assert_one_line_error(unreachable, "cannot reach the API server https://127.0.0.1:1", "'here'")


def test_namespace_and_all_namespaces_exclude_each_other():
    result = run_cli("status", "-n", "a", "-A")
    assert result.returncode == 2 and "not allowed with" in result.stderr and "Traceback" not in result.stderr
