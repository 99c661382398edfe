"""The platform with pods that really run (a real node, kubelet + containerd), installed as
`make e2e` installs it with monitoring on:

- the example pipeline's training step submits a TrainJob, waits, streams rank 0's log and reports
  a failure with its reason; it works as the pipeline ServiceAccount and is refused beyond it; the
  whole pipeline (data, training on two real pods, evaluation of the real checkpoint) runs with
  kfp.local, registers the checkpoint as a model version in MLflow's registry and evaluates the
  model read back by that name and version;
- then, after those TrainJobs called the admission webhooks, the controllers' real /metrics are
  scraped through the chart's metrics Services, the way Prometheus reaches them, with the chart's
  scraper token: every metric name the shipped alerts and dashboard use is served;
- the tracking server on your own PostgreSQL, then back on its SQLite file: across those upgrades (each a new
  server pod) the pipeline's run and model version are kept;
- the chart's `helm test` passes with helm v4, then with helm v3 after a `helm3 upgrade`.
"""

# No `from __future__ import annotations`: kfp reads the pipelines' real annotations.

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from support import postgres as postgres_support
from support.clusters import PIPELINE_NS
from support.pipelines import score, step_fails, tp, train_locally
from trainstack import helm, monitoring, tools, yamlio
from trainstack.e2e import base as basemod
from trainstack.e2e import suite as suitemod
from trainstack.e2e import tracking as trackingmod
from trainstack.jsontypes import dig

pytestmark = pytest.mark.e2e
REAL_NODE_GROUP = 2  # real nodes on clusters of its own, beside the first group (tests/e2e/conftest.py)

KUBECONFIG_ENV = "TRAINSTACK_PIPELINE_KUBECONFIG"
MODEL = "trainstack-pipeline-ddp"  # the registered model the pipeline test makes a version of
PIPELINE_MODEL: list[dict] = []  # that version, once the pipeline test made it (the database test reads it back)
USES_CLUSTERS = ("real_platform",)  # `cluster` asks for it by name (tests/support/clusters.py keeps it up until done)


@pytest.fixture(scope="module")
def cluster(request) -> dict:
    """The real-node platform (pods really run), or the cluster TRAINSTACK_PIPELINE_KUBECONFIG names
    (e.g. one kept with `trainstack e2e --keep`), with _NAMESPACE (default trainstack-pipeline) and
    _NODES (real, or kwok: pods are simulated and only the step's control flow is tested)."""
    kubeconfig = os.environ.get(KUBECONFIG_ENV)
    nodes = os.environ.get("TRAINSTACK_PIPELINE_NODES", "kwok") if kubeconfig else "real"
    if nodes not in ("real", "kwok"):
        pytest.fail(f"TRAINSTACK_PIPELINE_NODES must be real or kwok, not {nodes!r}")
    if not kubeconfig:
        kubeconfig = str(request.getfixturevalue("real_platform").provider.kubeconfig)
    kubectl = tools.find("kubectl")
    if kubectl is None:
        pytest.fail("kubectl is not installed: run 'make setup'")
    info = {"kubeconfig": str(Path(kubeconfig).resolve()), "kubectl": str(kubectl), "nodes": nodes,
            "namespace": os.environ.get("TRAINSTACK_PIPELINE_NAMESPACE", PIPELINE_NS),
            "platform": None}
    if not os.environ.get(KUBECONFIG_ENV) and info["namespace"] == PIPELINE_NS:
        info["platform"] = request.getfixturevalue("real_platform")  # it tracks PIPELINE_NS: MLflow registers
    _kubectl(info, "create", "namespace", info["namespace"], check=False)
    return info


def _kubectl(cluster: dict, *args: str, input_text: str | None = None, check: bool = True,
             kubeconfig: str | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run([cluster["kubectl"], *args], capture_output=True, text=True, input=input_text,
                            timeout=120, check=False,
                            env={**os.environ, "KUBECONFIG": kubeconfig or cluster["kubeconfig"]})
    if check:
        assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
    return result


def _trainjob(cluster: dict, name: str) -> dict:
    return json.loads(_kubectl(cluster, "get", "trainjob", name, "-n", cluster["namespace"], "-o", "json").stdout)


def _condition(trainjob: dict, kind: str) -> dict:
    return next((c for c in trainjob.get("status", {}).get("conditions", []) if c["type"] == kind), {})


def _step_inputs(cluster: dict, **inputs) -> dict:
    """On KWOK no container runs, so there is no log to stream and nothing is written to a volume."""
    defaults = {"script": tp.TRAIN_SCRIPT.read_text(), "script_args": ["--steps", "20"], "timeout_seconds": 600,
                "files": {tp.TRACKING_HELPER.name: tp.TRACKING_HELPER.read_text()}}  # train_ddp.py imports it
    if cluster["nodes"] == "kwok":
        defaults.update(stream_logs=False, require_output_volume=False)
    return {**defaults, **inputs}


def test_the_training_step_submits_waits_and_outputs_the_trainjob(cluster, tmp_path):
    """Real nodes: two pods train. KWOK: the control flow (submit, wait for Complete, outputs) only."""
    out = tp.run_training_step(cluster["kubeconfig"], cluster["namespace"], workdir=tmp_path,
                               **_step_inputs(cluster))
    job = _trainjob(cluster, out["trainjob"])
    assert _condition(job, "Complete").get("status") == "True", job.get("status")
    assert job["spec"]["trainer"]["numNodes"] == 2 and job["spec"]["runtimeRef"]["name"] == "torch-distributed"
    if cluster["nodes"] == "real":
        assert out["output_claim"] and out["output_mount_path"] == "/workspace/output", out
        # Fewer real nodes than pods: the CPU runtime's spread is `preferred` (files/runtimes/README.md),
        # so both pods share the one node and train together rather than wait for a second node.
        nodes = json.loads(_kubectl(cluster, "get", "nodes", "-o", "json").stdout)["items"]
        real = {n["metadata"]["name"] for n in nodes
                if dig(n["metadata"], "annotations", "kwok.x-k8s.io/node") != "fake"}
        pods = json.loads(_kubectl(cluster, "get", "pods", "-n", cluster["namespace"], "-l",
                                   f"jobset.sigs.k8s.io/jobset-name={out['trainjob']}", "-o", "json").stdout)["items"]
        ran = [(p["spec"].get("nodeName"), p["status"].get("phase")) for p in pods]
        assert len(real) == 1 and len(ran) == 2, (real, ran)
        assert ran == [(next(iter(real)), "Succeeded")] * 2, ran


def test_a_failing_trainjob_fails_the_step_with_its_reason(cluster, tmp_path, capsys):
    inputs = _step_inputs(cluster, script="import sys\nsys.exit(3)\n", script_args=[], num_nodes=1)
    # A namespaced copy of the golden runtime without Job retries (the golden one retries 6 times,
    # minutes of CrashLoopBackOff); on KWOK, labelled so that KWOK fails its pods, as the e2e suite does.
    from trainstack.cluster.local import FAIL_LABEL

    runtime = json.loads(_kubectl(cluster, "get", "clustertrainingruntime", "torch-distributed", "-o", "json").stdout)
    for job in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
        job["template"]["spec"]["backoffLimit"] = 0
        if cluster["nodes"] == "kwok":
            job["template"]["spec"]["template"].setdefault("metadata", {}).setdefault("labels", {})[FAIL_LABEL] = "true"
    labels = {k: v for k, v in runtime["metadata"]["labels"].items() if k == "trainer.kubeflow.org/framework"}
    failing = {"apiVersion": runtime["apiVersion"], "kind": "TrainingRuntime", "spec": runtime["spec"],
               "metadata": {"name": "pipeline-fail-fast", "namespace": cluster["namespace"], "labels": labels}}
    _kubectl(cluster, "apply", "-f", "-", input_text=json.dumps(failing))
    inputs["runtime"] = "pipeline-fail-fast"
    message = step_fails(capsys, Path(cluster["kubeconfig"]), tmp_path, namespace=cluster["namespace"], **inputs)
    assert message.startswith(f"TrainJob {cluster['namespace']}/") and " failed: " in message, message
    name = message.split()[1].split("/")[1]
    failed = _condition(_trainjob(cluster, name), "Failed")
    assert failed.get("status") == "True" and failed.get("reason") and failed["reason"] in message, (failed, message)


def test_an_unknown_runtime_is_one_line_naming_the_runtimes(cluster, tmp_path, capsys):
    message = step_fails(capsys, Path(cluster["kubeconfig"]), tmp_path, namespace=cluster["namespace"],
                          **_step_inputs(cluster, runtime="no-such-runtime"))
    assert message.startswith(f"run_trainjob: runtime 'no-such-runtime' does not exist in namespace "
                              f"{cluster['namespace']} or cluster-wide (runtimes: "), message
    assert "torch-distributed" in message


def _mlflow_post(uri: str, account: tuple[str, str], path: str, body: dict) -> int:
    """POST to MLflow's REST API (through the forwarded loopback port) as ACCOUNT: the HTTP status."""
    import base64
    import urllib.error
    import urllib.request

    token = base64.b64encode(f"{account[0]}:{account[1]}".encode()).decode()
    request = urllib.request.Request(f"{uri}/api/2.0/mlflow/{path}", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", "Authorization": f"Basic {token}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status
    except urllib.error.HTTPError as err:
        return err.code


def _service_account_kubeconfig(cluster: dict, namespace: str, path: Path) -> Path:
    """A kubeconfig for the pipeline ServiceAccount: the cluster's server and CA, a fresh token."""
    config = yamlio.load(_kubectl(cluster, "config", "view", "--raw", "--minify", "--flatten").stdout)
    token = _kubectl(cluster, "create", "token", "trainstack-pipeline", "-n", namespace,
                     "--duration", "1h").stdout.strip()
    config["users"] = [{"name": "pipeline", "user": {"token": token}}]
    config["contexts"][0]["context"]["user"] = "pipeline"
    path.write_text(yaml.safe_dump(config))
    return path


def test_the_step_works_as_the_pipeline_service_account_and_nothing_more(cluster, tmp_path, capsys):
    ns = cluster["namespace"]
    _kubectl(cluster, "apply", "-f", "-", input_text=yaml.safe_dump_all(tp.rbac_manifests(ns, steps=("train",))))
    kubeconfig = _service_account_kubeconfig(cluster, ns, tmp_path / "sa.kubeconfig")

    # what the account may do is the point, not training (the tests before and after train): one pod, no torch
    out = tp.run_training_step(kubeconfig, ns, workdir=tmp_path / "ok", **_step_inputs(
        cluster, script="print('ran as the pipeline service account')\n", script_args=[], files={}, num_nodes=1))
    assert _condition(_trainjob(cluster, out["trainjob"]), "Complete").get("status") == "True"

    def can(*args: str) -> bool:
        return _kubectl(cluster, "auth", "can-i", *args, check=False, kubeconfig=str(kubeconfig)).stdout.strip() == "yes"

    assert can("create", "trainjobs.trainer.kubeflow.org", "-n", ns)
    # `kubectl auth can-i get pods/log` would ask about a pod named "log": subresources take a flag
    assert can("get", "pods", "--subresource=log", "-n", ns) and can("list", "events", "-n", ns)
    assert can("list", "clustertrainingruntimes.trainer.kubeflow.org")
    for verb, resource in (("delete", "trainjobs.trainer.kubeflow.org"), ("update", "trainjobs.trainer.kubeflow.org"),
                           ("create", "pods"), ("create", "trainingruntimes.trainer.kubeflow.org"),
                           ("get", "secrets"), ("create", "pods --subresource=exec")):
        assert not can(verb, *resource.split(), "-n", ns), (verb, resource)
    # the namespace's MLflow credential (register_model), and no other Secret
    assert can("get", "secret/trainstack-tracking", "-n", ns) and not can("get", "secret/other", "-n", ns)
    assert not can("patch", "clustertrainingruntimes.trainer.kubeflow.org")
    assert not can("create", "trainjobs.trainer.kubeflow.org", "-n", "default")

    # a namespace the step may not use: one line, before anything is created
    message = step_fails(capsys, kubeconfig, tmp_path / "other", namespace="default", **_step_inputs(cluster))
    assert message.startswith("run_trainjob: namespace default: this step may not read TrainingRuntimes there (403 "), message


def test_the_pipeline_trains_on_real_pods_and_evaluates_the_real_checkpoint(cluster, tmp_path):
    if cluster["nodes"] != "real":
        pytest.skip("KWOK pods do not run: no checkpoint exists to evaluate (the training step's control flow "
                    "is what the other e2e tests check there)")
    ns = cluster["namespace"]
    _kubectl(cluster, "apply", "-f", "-", input_text=yaml.safe_dump_all(tp.rbac_manifests(ns)))
    kubeconfig = _service_account_kubeconfig(cluster, ns, tmp_path / "sa.kubeconfig")
    platform = cluster["platform"]
    if platform is None:  # a cluster of the user's: its tracking is unknown, the volume is read
        result = tp.run_local(kubeconfig, ns, workdir=tmp_path / "run", steps=40, timeout_seconds=900)
    else:  # the steps run here: they reach MLflow through a forwarded port, with the namespace's Secret
        with trackingmod.forwarded(platform.kube, platform.lock) as uri:
            result = tp.run_local(kubeconfig, ns, workdir=tmp_path / "run", steps=40, timeout_seconds=900,
                                  model_name=MODEL, tracking_uri=uri)
            version = str(int(result["metrics"]["model_version"]))
            model = trackingmod.read_model_version(uri, MODEL, version, trackingmod.credential(platform.kube, ns),
                                                   platform.lock)
            # another namespace's account may not add a version to this namespace's model
            refused = _mlflow_post(uri, trackingmod.credential(platform.kube, trackingmod.OTHER_NS),
                                   "model-versions/create", {"name": MODEL, "source": model["source"]})
        assert refused == 403, refused
        # the version came from the TrainJob's own run (experiment: the namespace), and evaluate read it back
        assert (model["status"], model["run_name"], model["run_status"]) == ("READY", result["trainjob"],
                                                                              "FINISHED"), model
        assert model["source"].endswith("/checkpoint") and model["tags"]["trainjob"] == result["trainjob"], model
    job = _trainjob(cluster, result["trainjob"])
    assert _condition(job, "Complete").get("status") == "True"
    assert result["metrics"]["checkpoint_step"] == 40 and result["metrics"]["world_size"] == 2, result
    # the same evaluation of a model trained one step here is the bar the real training must beat
    [baseline] = score(kubeconfig, tmp_path / "baseline", train_locally(1, tmp_path / "one-step"))
    assert math.isfinite(result["final_loss"]) and result["final_loss"] < baseline["final_loss"], (result, baseline)
    print(json.dumps({"pipeline_seconds": result["seconds"], "final_loss": result["final_loss"]}))
    if platform is not None:  # the tracking server's database test upgrades the release: the runs must stay
        PIPELINE_MODEL.append(model)


def _upgrade(platform, value: str) -> None:
    """`helm upgrade` of the platform's release with its values and VALUE (--set), waiting for it."""
    release = platform.release()
    # --force-conflicts: controllers own fields of chart objects (webhook certificates), docs/upgrading.md
    result = release.run(release.upgrade(*platform.install_args, "--reuse-values", "--set", value, "--wait",
                                         "--timeout", "180s", "--force-conflicts"), check=False, timeout=240)
    assert result.returncode == 0, (f"{helm.first_error_line(result.stderr or result.stdout)}; "
                                    f"{json.dumps(_tracking_pods(platform))}")


def _tracking_pods(platform) -> dict:
    """Each tracking server pod's containers that are not ready: their state and last log lines."""
    found = {}
    for pod in platform.read("pods", basemod.NAMESPACE, label_selector="app.kubernetes.io/component=tracking"):
        name = pod["metadata"]["name"]
        st = pod.get("status") or {}
        for c in (st.get("initContainerStatuses") or []) + (st.get("containerStatuses") or []):
            if not c.get("ready") and "terminated" not in (c.get("state") or {}) or c.get("restartCount"):
                log = platform.kube.kubectl("logs", name, "-n", basemod.NAMESPACE, "-c", c["name"], "--tail=6",
                                            check=False)
                found[f"{name}/{c['name']}"] = {"state": c.get("state"), "restarts": c.get("restartCount"),
                                                "log": (log.stdout + log.stderr).strip().splitlines()[-6:]}
    return found


def _server_pod(platform) -> dict:
    pods = platform.read("pods", basemod.NAMESPACE, label_selector="app.kubernetes.io/component=tracking")
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    return pods[0]


def _the_upgrades_kept_the_runs(platform, ns: str, model: dict, before: str) -> None:
    """`helm upgrade`s that replaced the tracking server's pod (changed values, Recreate; the pod was BEFORE) kept
    every run and model version: they live in the database and artifacts on the claim, which the new pod migrates
    and serves."""
    assert _server_pod(platform)["metadata"]["uid"] != before, "the upgrades did not replace the tracking server"
    with trackingmod.forwarded(platform.kube, platform.lock) as uri:
        again = trackingmod.read_model_version(uri, MODEL, model["version"], trackingmod.credential(platform.kube, ns),
                                               platform.lock)
        read = trackingmod.read_runs(uri, ns, [model["run_name"]], trackingmod.credential(platform.kube, ns),
                                     trackingmod.credential(platform.kube, trackingmod.OTHER_NS), platform.lock)
    assert again == model, (again, model)
    [run] = read["runs"][model["run_name"]]
    assert run["run_id"] == model["run_id"] and run["status"] == "FINISHED", run
    assert run["histories"]["loss"] == list(range(1, 41)) and "checkpoint/checkpoint.pt" in run["artifacts"], run


# ---- the controllers' real /metrics, scraped the way Prometheus does ---------------------------------

SCRAPE = "import sys; from trainstack import monitoring; sys.stdout.write(monitoring.scrape(sys.argv[1], sys.argv[2] or None))"


def _scrape_in_cluster(platform: suitemod.Suite, url: str, token: str) -> tuple[int, str]:
    """GET url from inside the cluster's network namespace (where Service addresses route, as from
    a Prometheus pod); (0, text) on success, else (1, the one-line error)."""
    enter = platform.provider.cluster.sandbox.enter_net()
    result = subprocess.run([*enter, sys.executable, "-c", SCRAPE, url, token], capture_output=True, text=True,
                            timeout=60, check=False)
    return result.returncode, result.stdout if result.returncode == 0 else result.stderr.strip().splitlines()[-1]


def test_the_controllers_metrics_services_serve_every_name_the_alerts_and_dashboard_use(cluster, real_platform):
    """Runs after the pipeline tests: their TrainJobs called the Trainer and JobSet webhooks, so the
    webhook latency histograms exist; a metric a rule names that is not served would never fire."""
    ns = basemod.NAMESPACE
    kube = {"kubeconfig": cluster["kubeconfig"], "kubectl": cluster["kubectl"]}
    secret = json.loads(_kubectl(kube, "get", "secret", "trainstack-metrics-scraper-token", "-n", ns, "-o",
                                 "json").stdout)
    import base64

    token = base64.b64decode(secret["data"]["token"]).decode()
    texts = {}
    for controller in ("trainer", "jobset"):
        service = json.loads(_kubectl(kube, "get", "service", f"trainstack-{controller}-metrics", "-n", ns, "-o",
                                      "json").stdout)
        slices = json.loads(_kubectl(kube, "get", "endpointslices", "-n", ns, "-l",
                                     f"kubernetes.io/service-name=trainstack-{controller}-metrics", "-o",
                                     "json").stdout)["items"]
        ready = [e for s in slices for e in s.get("endpoints") or [] if e.get("conditions", {}).get("ready")]
        assert ready, f"the {controller} metrics Service selects no ready pod"
        url = f"https://{service['spec']['clusterIP']}:8443/metrics"
        rc, text = _scrape_in_cluster(real_platform, url, token)
        assert rc == 0, f"{controller}: {text}"
        texts[controller] = text
        if controller == "jobset":  # controller-runtime's authn/authz filter: no token, no metrics
            rc, refused = _scrape_in_cluster(real_platform, url, "")
            assert rc != 0 and "401" in refused, refused
    report = monitoring.verify_scrape(texts)
    for controller, names in report.items():
        assert names["present"], f"{controller}: none of the names the rules use were served"
        assert not names["missing"], f"{controller} does not serve {names['missing']} (used by the rules/dashboard)"
    print(json.dumps({c: len(r["present"]) for c, r in report.items()}))


# ---- the tracking server on your own PostgreSQL (tracking.existingDatabaseSecret) ---------------------

def test_the_tracking_server_runs_on_your_postgresql(cluster, real_platform):
    """Your database, as docs/tracking.md says: a Secret with the two URIs, named in values. The server's
    `migrate` init container creates MLflow's tables there, the accounts sidecar makes the team's user in
    the new accounts database with the password its Secret already holds, and a run logged as the team
    lands in PostgreSQL's `runs` table. The database is PostgreSQL 15 from the lock's Debian pin, on the
    real node's address (outside the cluster, as a team's database would be)."""
    node = real_platform.provider.cluster.nodes[0]
    ns = PIPELINE_NS
    before = _server_pod(real_platform)["metadata"]["uid"]
    with postgres_support.running(node.sandbox.netns, node.ip, ("mlflow", "mlflow_auth")) as db:
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tracking-postgres",
                                                                      "namespace": basemod.NAMESPACE},
                  "stringData": {"backendStoreUri": db.uri("mlflow"), "authDatabaseUri": db.uri("mlflow_auth")}}
        _kubectl(cluster, "apply", "-f", "-", input_text=json.dumps(secret))
        try:
            _upgrade(real_platform, "tracking.existingDatabaseSecret=tracking-postgres")
            # the new pod migrated the database before it served
            assert db.psql("mlflow", "select count(*) from alembic_version") == [["1"]]
            own = trackingmod.credential(real_platform.kube, ns)
            with trackingmod.forwarded(real_platform.kube, real_platform.lock) as uri:
                deadline = time.monotonic() + 120  # the sidecar makes the user within its sync period
                while True:
                    try:
                        run_id = trackingmod.log_run(uri, ns, "on-postgresql", own, real_platform.lock)
                        break
                    except trackingmod.TrackingFailure:
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(5)
                read = trackingmod.read_runs(uri, ns, ["on-postgresql"], own,
                                             trackingmod.credential(real_platform.kube, trackingmod.OTHER_NS),
                                             real_platform.lock)
            [run] = read["runs"]["on-postgresql"]
            assert run["run_id"] == run_id and run["status"] == "FINISHED" and run["histories"]["loss"] == [1, 2, 3]
            assert read["other_reads_run"] is False, read
            assert db.psql("mlflow", f"select status from runs where run_uuid = '{run_id}'") == [["FINISHED"]]
            assert [ns] in db.psql("mlflow_auth", "select username from users")
        finally:  # back to the SQLite file on the claim before the database goes away
            _upgrade(real_platform, "tracking.existingDatabaseSecret=")
            _kubectl(cluster, "delete", "secret", "tracking-postgres", "-n", basemod.NAMESPACE, check=False)
    # two upgrades, each a new pod, and back on the SQLite file on the claim: what the pipeline test tracked
    # there earlier in this module (its run, metrics, checkpoint and model version) is all served again
    for model in PIPELINE_MODEL:
        _the_upgrades_kept_the_runs(real_platform, ns, model, before)


def test_helm_v3_upgrades_what_helm_v4_installed_and_the_charts_helm_test_passes_with_both(real_platform):
    """Users drive the chart with either client: the release stock helm v4 installed from the cluster's registry
    passes the chart's `helm test` with helm v4, then with helm v3 after a `helm3 upgrade` from the same
    published chart (`make e2e` runs helm v4's alone). Each run: the golden runtimes served, a TrainJob admitted
    by the webhooks and policies, a `:latest` one denied."""
    assert real_platform.install_args[0].startswith("oci://127.0.0.1:"), real_platform.install_args
    outcome = real_platform.helm_test(("helm", "helm3"))
    for binary in ("helm", "helm3"):
        tested = outcome.data[binary]
        assert tested["phase"] == "Succeeded" and not tested["failed"] and len(tested["checks"]) == 3, tested


def teardown_module() -> None:
    # kfp.local keeps its settings in a process-wide singleton; leave nothing for other tests
    from kfp.local import config

    config.LocalExecutionConfig.instance = None
