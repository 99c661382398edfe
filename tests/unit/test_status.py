"""`trainstack status` without a cluster: TrainJob states, ages, the summary, bad contexts.
(On a real API server with 1,000 TrainJobs: tests/integration/test_status_scale.py.)"""

from __future__ import annotations

import http.server
import threading
from datetime import UTC, datetime

import pytest
import yaml

from support.cli import assert_one_line_error, run_cli
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
    unknown = run_cli("status", "--kubeconfig", str(config), "--context", "there")
    assert_one_line_error(unknown, "kube context 'there'")
    unreachable = run_cli("status", "--kubeconfig", str(config), "-A")
    assert_one_line_error(unreachable, "cannot reach the API server https://127.0.0.1:1", "'here'")
    # one exit code for the same kind of problem, a kubeconfig or context that does not lead to a cluster:
    # 1 (errors.py: the user's input), as for a missing or malformed file; 2 is for wrong usage only
    assert {r.returncode for r in (run_cli("status", "--kubeconfig", str(missing)), unknown, unreachable)} == {1}


def test_a_malformed_kubeconfig_is_one_line_naming_the_file(tmp_path):
    for name, text in (("broken", "foo: [\n"), ("tabbed", "apiVersion: v1\n\tkind: Config\n"),
                       ("a-list", "- one\n- two\n")):
        config = tmp_path / name
        config.write_text(text)
        result = run_cli("status", "--kubeconfig", str(config))
        assert result.returncode == 1, result.stderr  # the user's file, not a bug in trainstack (3)
        assert_one_line_error(result, "no usable kube context", str(config))


def test_namespace_and_all_namespaces_exclude_each_other():
    result = run_cli("status", "-n", "a", "-A")
    assert result.returncode == 2 and "not allowed with" in result.stderr and "Traceback" not in result.stderr


def pod(name, phase="Pending", waiting=None, unschedulable_since=None, init=False):
    statuses = [{"name": "node", "state": {"waiting": waiting} if waiting else {"running": {}}}]
    conditions = ([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                    "message": "0/3 nodes are available: 3 Insufficient cpu.",
                    "lastTransitionTime": unschedulable_since}] if unschedulable_since else [])
    key = "initContainerStatuses" if init else "containerStatuses"
    return {"metadata": {"name": name, "namespace": "team-a", "labels": {status.JOBSET_NAME: name.rsplit("-", 4)[0]}},
            "status": {"phase": phase, key: statuses, "conditions": conditions}}


def test_pods_that_cannot_start_are_named_with_their_reason():
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    nocmd = pod("nocmd-node-0-0-abcde", waiting={"reason": "CreateContainerError",
                                                 "message": "failed to generate container spec: no command specified"})
    assert status.why_blocked([nocmd], now) == ("nocmd-node-0-0-abcde: CreateContainerError: "
                                                "failed to generate container spec: no command specified")
    pull = pod("x-node-0-0-abcde", waiting={"reason": "ImagePullBackOff"}, init=True)
    assert status.why_blocked([pull], now) == "x-node-0-0-abcde: ImagePullBackOff"
    # a pull still in progress, a container starting, a pod just created: nothing to flag
    assert status.why_blocked([pod("a-node-0-0-abcde", waiting={"reason": "ContainerCreating"})], now) == ""
    assert status.why_blocked([pod("a-node-0-0-abcde", phase="Running")], now) == ""
    # unschedulable: flagged once it has been so for the threshold
    fresh = pod("big-node-0-0-abcde", unschedulable_since="2026-12-01T11:58:00Z")
    old = pod("big-node-0-0-abcde", unschedulable_since="2026-12-01T11:50:00Z")
    assert status.why_blocked([fresh], now) == ""
    assert status.why_blocked([old], now) == ("big-node-0-0-abcde: Unschedulable for 10m: "
                                              "0/3 nodes are available: 3 Insufficient cpu.")
    assert status.why_blocked([fresh], now, unschedulable_after=60) != ""


class FakeCluster:
    """The list calls `collect` makes, answered from fixed objects (the API server's JSON)."""

    context = "test"

    def __init__(self, trainjobs, pods):
        self.trainjobs, self.pods, self.selectors = trainjobs, pods, []

    def list(self, path, selector=""):
        self.selectors.append((path, selector))
        if path.endswith("/trainjobs"):
            return self.trainjobs
        if path.endswith("/pods"):
            return [p for p in self.pods if not selector or selector in p["metadata"]["labels"]]
        return []


def test_status_flags_only_active_trainjobs_whose_pods_cannot_start(lock):
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    created = {"creationTimestamp": "2026-12-01T11:00:00Z", "namespace": "team-a"}
    jobs = [{"metadata": {"name": "nocmd", **created}, **tj()},
            {"metadata": {"name": "fine", **created}, **tj(jobs=[{"active": 1}])},
            {"metadata": {"name": "done", **created}, **tj([("Complete", "True")])}]
    pods = [pod("nocmd-node-0-0-abcde", waiting={"reason": "CreateContainerError", "message": "no command specified"}),
            pod("fine-node-0-0-abcde", phase="Running"),
            pod("done-node-0-0-abcde", waiting={"reason": "ErrImagePull"})]  # a finished job is not flagged
    cluster = FakeCluster(jobs, pods)
    result = status.collect(cluster, "team-a", lock=lock, now=now)
    blocked = {t.name: t.blocked for t in result.trainjobs}
    assert blocked == {"nocmd": "nocmd-node-0-0-abcde: CreateContainerError: no command specified", "fine": "",
                       "done": ""}
    assert ("/api/v1/namespaces/team-a/pods", status.JOBSET_NAME) in cluster.selectors
    assert result.as_json()["trainjobs"]["items"][0]["blocked"].startswith("nocmd-node-0-0-abcde")


RUN_LINE = '{"event": "tracking", "experiment_id": "7", "ok": true, "run_id": "abc123", "uri": "http://mlflow"}'


def test_the_run_is_the_last_tracking_line_that_started_one():
    lines = ["W1203 torchrun warning", '{"event": "rendezvous", "rank": 0}', RUN_LINE,
             '{"event": "tracking", "ok": false, "error": "MlflowException: refused"}', "{not json"]
    log = "\n".join(lines)
    assert status.run_of(log) == {"run_id": "abc123", "experiment_id": "7"}
    assert status.run_of('{"event": "tracking", "ok": false, "error": "no mlflow"}') == {}
    assert status.run_link("http://127.0.0.1:5000/", status.run_of(RUN_LINE)) == \
        "http://127.0.0.1:5000/#/experiments/7/runs/abc123"
    assert status.run_link("", status.run_of(RUN_LINE)) == ""


class LogCluster(FakeCluster):
    """FakeCluster with pod logs (`read`); a log of None is a pod whose log cannot be read."""

    def __init__(self, trainjobs, pods, logs):
        super().__init__(trainjobs, pods)
        self.logs, self.reads = logs, []

    def read(self, path, params=None, accept="application/json", from_kubelet=False):
        self.reads.append((path, params))
        assert from_kubelet  # a log: its server errors are not retried
        text = self.logs[path.split("/")[-2]]
        if text is None:
            raise status.UserError("the API server refused GET: 403 Forbidden")
        return text.encode()


def test_runs_come_from_the_newest_rank0_pod_of_each_trainjob(lock):
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    created = {"creationTimestamp": "2026-12-01T11:00:00Z", "namespace": "team-a"}
    jobs = [{"metadata": {"name": name, **created}, **tj([("Complete", "True")])} for name in ("a", "b", "c")]

    def rank0(name, job, created_at):
        p = pod(name, phase="Succeeded")
        p["metadata"].update(namespace="team-a", creationTimestamp=created_at)
        p["metadata"]["labels"] = {status.JOBSET_NAME: job, status.RANK0_SELECTOR: ""}
        return p

    pods = [rank0("a-node-0-0-old", "a", "2026-12-01T11:00:00Z"), rank0("a-node-0-0-new", "a", "2026-12-01T11:05:00Z"),
            rank0("b-node-0-0-x", "b", "2026-12-01T11:00:00Z")]  # c: its pods are gone
    logs = {"a-node-0-0-old": RUN_LINE.replace("abc123", "failed-attempt"), "a-node-0-0-new": RUN_LINE,
            "b-node-0-0-x": None}
    cluster = LogCluster(jobs, pods, logs)
    result = status.collect(cluster, "team-a", lock=lock, now=now, runs=True, tracking_url="http://mlflow:5000")
    rows = {t.name: t for t in result.trainjobs}
    assert (rows["a"].run_id, rows["a"].experiment_id) == ("abc123", "7")  # the attempt that ran last
    assert rows["a"].run_link == "http://mlflow:5000/#/experiments/7/runs/abc123"
    assert rows["b"].run_id == rows["c"].run_id == "" and result.unreadable_logs == 1
    assert cluster.reads[0][1] == {"container": "node", "limitBytes": status.RUN_LOG_BYTES}
    assert result.as_json()["trainjobs"]["items"][0]["run_link"].endswith("/runs/abc123")


def test_a_log_the_kubelet_cannot_serve_is_asked_for_once_while_a_list_is_retried(tmp_path):
    """A pod's log comes from its kubelet: a 500 (no kubelet answers, as for a simulated node) is read once, where
    five retries took 6 s a pod; the API server's own 500 on a list is retried."""
    asked: dict[str, int] = {}

    class Server(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            path = self.path.split("?")[0]
            asked[path] = asked.get(path, 0) + 1
            ok = path == "/api/v1/pods" and asked[path] > 1
            body = b'{"items": []}' if ok else b'{"kind": "Status", "code": 500}'
            self.send_response(200 if ok else 500)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Server)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{server.server_address[1]}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    try:
        cluster = status.Cluster(str(kubeconfig))
        with pytest.raises(status.UserError, match="500"):
            cluster.read("/api/v1/namespaces/a/pods/p/log", {"container": "node"}, accept="*/*", from_kubelet=True)
        assert cluster.list("/api/v1/pods") == []
    finally:
        server.shutdown()
    assert asked == {"/api/v1/namespaces/a/pods/p/log": 1, "/api/v1/pods": 2}
