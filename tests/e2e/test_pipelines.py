"""examples/pipelines: the training step as a Kubeflow Pipelines component, and the example pipeline.

Offline: the pipeline compiles to KFP IR with kfp's compiler and the IR says what a platform team
relies on (steps and their order, the step's inputs and outputs, images and the SDK pin from the
lock, caching and retries); bad input fails the step, run by kfp.local, with one line; the data and
evaluation steps score a real checkpoint of examples/train_ddp.py.

On a real API server whose Trainer controller the test plays: submit, wait, failure reasons, policy
denials, the three steps in order. On the real-node cluster (tests/e2e/test_real_platform.py): the
whole pipeline trains on real pods and evaluates the real checkpoint.
"""

# No `from __future__ import annotations`: the pipeline defined in a test needs real annotations (kfp).

import json
import math
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from support.pipelines import score, step_fails, tp, train_locally
from trainstack import yamlio

BESIDE_REAL_NODES = True  # KWOK clusters and local processes only (tests/e2e/conftest.py)


@pytest.fixture(scope="module")
def kubeflow_sdk() -> None:
    """kfp.local installs a step's packages into this environment when they are missing: make sure
    they are there, so no test installs anything."""
    probe = subprocess.run([sys.executable, "-c", "import kubeflow.trainer"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.fail("the Kubeflow SDK is not installed: run 'make setup' (it runs 'trainstack smoke install')")


@pytest.fixture
def nowhere_kubeconfig(tmp_path) -> Path:
    """A kubeconfig whose API server is a loopback port nothing listens on."""
    from trainstack.cluster.local import free_port

    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{free_port()}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    return path


BAD_INPUTS = [
    ({"num_nodes": 0, "script": "print(1)"}, "run_trainjob: num_nodes must be at least 1, got 0"),
    ({"script": "print(1)", "command": ["true"]}, "run_trainjob: give exactly one of script"),
    ({}, "run_trainjob: give exactly one of script"),
    ({"script": "print('$HOME')"}, "run_trainjob: script, script_args and files must not contain $"),
    ({"script": "print(1)", "files": {"helper.py": "X = '$HOME'"}}, "and files must not contain $"),
    ({"script": "print(1)", "files": {"../helper.py": "X = 1"}}, "files: '../helper.py' is not a plain file name"),
    ({"script": "print(1)", "script_args": ["a\\b"]}, "must not contain \\"),
    ({"script": "print(1)", "timeout_seconds": 1}, "timeout_seconds must be at least 10"),
]


@pytest.mark.slow
def test_bad_input_fails_the_step_with_one_line(kubeflow_sdk, nowhere_kubeconfig, tmp_path, capsys):
    """One bad input as the step runs it (kfp.local: a subprocess that installs the step's packages and runs it);
    the step's checks are its function's first lines, so the other cases below call that function directly."""
    inputs, expected = BAD_INPUTS[0]
    assert expected in step_fails(capsys, nowhere_kubeconfig, tmp_path, **inputs)


@pytest.mark.parametrize(("inputs", "expected"), BAD_INPUTS)
def test_each_bad_input_is_one_error_line_before_the_step_reaches_a_cluster(nowhere_kubeconfig, monkeypatch,
                                                                           capsys, inputs, expected):
    """The step's own function (what kfp.local runs in its subprocess), in this process: exit 1 and one
    `error:` line on stderr, before anything reads the cluster (whose kubeconfig answers nothing)."""
    monkeypatch.setenv("KUBECONFIG", str(nowhere_kubeconfig))
    with pytest.raises(SystemExit) as stopped:
        tp.run_trainjob.python_func(namespace="team-a", **inputs)
    assert stopped.value.code == 1
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    errors = [ln for ln in err.splitlines() if ln.strip()]
    assert len(errors) == 1 and errors[0].startswith("error: run_trainjob: ") and expected in errors[0], err


@pytest.mark.slow
def test_an_unreachable_cluster_fails_the_step_with_one_line(kubeflow_sdk, nowhere_kubeconfig, tmp_path, capsys):
    message = step_fails(capsys, nowhere_kubeconfig, tmp_path, script="print(1)")
    assert message.startswith("run_trainjob: cannot read TrainingRuntime team-a/torch-distributed: "
                              "the API server does not answer"), message


@pytest.mark.slow
@pytest.mark.torch
def test_the_data_and_evaluation_steps_score_a_real_checkpoint(kubeflow_sdk, nowhere_kubeconfig, tmp_path):
    """train_ddp.py trains here (one process); evaluate reads its checkpoint where the claim would be mounted."""
    barely, trained = score(nowhere_kubeconfig, tmp_path / "run", train_locally(1, tmp_path / "one-step"),
                             train_locally(40, tmp_path / "forty-steps"))
    assert (barely["checkpoint_step"], trained["checkpoint_step"]) == (1, 40)
    assert trained["world_size"] == 1
    assert math.isfinite(trained["final_loss"]) and 0 < trained["final_loss"] < barely["final_loss"]


@pytest.mark.slow
@pytest.mark.torch
def test_evaluation_without_an_output_volume_is_one_line(kubeflow_sdk, nowhere_kubeconfig, tmp_path, capsys):
    with pytest.raises(tp.PipelineFailed) as failure:
        score(nowhere_kubeconfig, tmp_path, tmp_path / "nothing-here", claim="")
    assert str(failure.value) == "evaluate: TrainJob team-a/local has no output volume, so there is no checkpoint to read"
    assert "Traceback" not in capsys.readouterr().out


# ---- against a real API server, the Trainer controller played by the test --------------------------

@pytest.fixture(scope="module")
def apiserver(chart_ready, local_cluster):
    """The shared bare cluster (tests/support/clusters.py: the pinned kube-apiserver with its KWOK pools, no chart)
    with the Trainer CRDs and the golden torch-distributed runtime (output volume on). No Trainer
    controller runs: a test that needs a TrainJob to end writes its status condition the way the
    controller does, and says so. All but the CRDs is deleted after the module."""
    from support.clusters import scratch
    from trainstack import helm

    with scratch(local_cluster) as cluster:
        for crd in sorted((chart_ready / "crds").glob("*.trainer.kubeflow.org.yaml")):
            # the same CRDs as other modules applied there, maybe with another field manager
            cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd))

        def torch_runtime(*values: str) -> dict:
            rendered = helm.run(["template", "t", str(chart_ready), "-n", "kubeflow-system", "--kube-version",
                                 cluster.lock.kubernetes_version, "--show-only", "templates/runtimes/clustertrainingruntimes.yaml",
                                 *values]).stdout
            return next(d for d in yamlio.load_all(rendered) if d and d["metadata"]["name"] == "torch-distributed")

        cluster.apply([torch_runtime("--set", "runtimes.defaults.output.enabled=true")])
        for ns in ("team-a", "team-b"):
            cluster.kubectl("create", "namespace", ns)
        plain = torch_runtime()  # the chart's default: no output volume
        plain.update(kind="TrainingRuntime", metadata={"name": "no-output", "namespace": "team-a",
                                                       "labels": plain["metadata"]["labels"]})
        cluster.apply([plain])
        # the chart's guard rails (ValidatingAdmissionPolicies, their bindings and params) as shipped
        cluster.kubectl("create", "namespace", "kubeflow-system")
        policies = helm.run(["template", "t", str(chart_ready), "-n", "kubeflow-system", "--kube-version",
                             cluster.lock.kubernetes_version, "--show-only", "templates/policies/*.yaml"]).stdout
        cluster.apply([d for d in yamlio.load_all(policies) if d])
        cluster.apply(tp.rbac_manifests("team-a", steps=("train",)))
        config = yamlio.load(cluster.kubectl("config", "view", "--raw", "--minify", "--flatten").stdout)
        token = cluster.kubectl("create", "token", "trainstack-pipeline", "-n", "team-a").stdout.strip()
        config["users"] = [{"name": "pipeline", "user": {"token": token}}]
        config["contexts"][0]["context"]["user"] = "pipeline"
        sa = cluster.workdir / "pipeline-sa.kubeconfig"
        sa.write_text(yaml.safe_dump(config))
        yield {"cluster": cluster, "sa_kubeconfig": sa}


def _play_the_controller(cluster, namespace: str, condition: dict, seen: set) -> threading.Thread:
    """Once the step has created its TrainJob, set the terminal condition Trainer would set."""
    def run() -> None:
        for _ in range(240):
            jobs = [j["metadata"]["name"] for j in cluster.kubectl_json("get", "trainjobs", "-n", namespace)["items"]]
            new = [j for j in jobs if j not in seen]
            if new:
                seen.update(new)
                stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                status = {"status": {"conditions": [{**condition, "status": "True", "lastTransitionTime": stamp}]}}
                cluster.kubectl("patch", "trainjob", new[0], "-n", namespace, "--subresource=status",
                                "--type=merge", "-p", json.dumps(status))
                return
            time.sleep(0.5)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.e2e
def test_on_the_api_server_the_step_submits_as_the_service_account_waits_and_outputs(apiserver, tmp_path):
    cluster, seen = apiserver["cluster"], set()
    player = _play_the_controller(cluster, "team-a", {"type": "Complete", "reason": "JobsCompleted",
                                                      "message": "jobs completed"}, seen)
    out = tp.run_training_step(apiserver["sa_kubeconfig"], "team-a", workdir=tmp_path, queue="team-a-queue",
                               script=tp.TRAIN_SCRIPT.read_text(), script_args=["--steps", "5"], timeout_seconds=120)
    player.join(timeout=5)
    name = out["trainjob"]
    assert out["output_claim"] == f"output-{name}" and out["output_mount_path"] == "/workspace/output"
    job = cluster.kubectl_json("get", "trainjob", name, "-n", "team-a")
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a-queue"
    assert job["spec"]["runtimeRef"]["name"] == "torch-distributed" and job["spec"]["trainer"]["numNodes"] == 2
    assert "'argv': ['--steps', '5']" in job["spec"]["trainer"]["command"][2]  # train_ddp.py and its arguments


@pytest.mark.e2e
def test_on_the_api_server_a_failed_trainjob_fails_the_step_with_its_reason(apiserver, tmp_path, capsys):
    cluster = apiserver["cluster"]
    seen = set(_names(cluster, "team-a"))
    player = _play_the_controller(cluster, "team-a", {"type": "Failed", "reason": "FailedJobs",
                                                      "message": "jobset failed: job node failed"}, seen)
    message = step_fails(capsys, apiserver["sa_kubeconfig"], tmp_path, script="print(1)", timeout_seconds=120)
    player.join(timeout=5)
    assert message.startswith("TrainJob team-a/") and message.endswith(
        " failed: FailedJobs: jobset failed: job node failed"), message


@pytest.mark.e2e
def test_on_the_api_server_a_policy_denial_is_one_line_with_the_policys_message(apiserver, tmp_path, capsys):
    deadline = time.monotonic() + 30  # a new ValidatingAdmissionPolicy takes effect within seconds
    while True:
        message = step_fails(capsys, apiserver["sa_kubeconfig"], tmp_path / str(int(time.monotonic())),
                              script="print(1)", image="docker.io/library/python:latest", timeout_seconds=30)
        if "was not created" in message or time.monotonic() > deadline:
            break
        _delete_trainjobs(apiserver["cluster"], "team-a")
    assert message.startswith("run_trainjob: the TrainJob was not created in team-a on runtime torch-distributed: "), message
    assert "trainstack-image-tag" in message and "denied" in message, message


@pytest.mark.e2e
@pytest.mark.torch
def test_on_the_api_server_run_local_runs_the_three_steps_in_order(apiserver, tmp_path, capsys):
    """The whole pipeline through run_local: the real data step, the training step (its TrainJob ended by
    the test), then the evaluation, which this ServiceAccount (training rights only) may not start its
    reader pod for: the run stops there with the evaluation's one line."""
    cluster = apiserver["cluster"]
    before = set(_names(cluster, "team-a"))
    player = _play_the_controller(cluster, "team-a", {"type": "Complete", "reason": "JobsCompleted",
                                                      "message": "jobs completed"}, set(before))
    with pytest.raises(tp.PipelineFailed) as failure:
        tp.run_local(apiserver["sa_kubeconfig"], "team-a", workdir=tmp_path, steps=5, timeout_seconds=120)
    player.join(timeout=5)
    log = capsys.readouterr().out
    assert "Traceback" not in log
    [trainjob] = set(_names(cluster, "team-a")) - before
    assert str(failure.value).startswith(f"evaluate: cannot start a pod in team-a to read volume output-{trainjob}: "
                                         "403 "), failure.value
    # The pipeline's int parameters reach train_ddp.py as ints ("5", not the JSON "5.0" argparse refuses).
    trainer = json.dumps(cluster.kubectl_json("get", "trainjob", trainjob, "-n", "team-a")["spec"]["trainer"])
    assert "'argv': ['--steps', '5', '--seed', '0', '--features', '16']" in trainer, trainer
    finished = [(task, "SUCCESS" if "SUCCESS" in ln else "FAILURE") for ln in log.splitlines()
                if "finished with status" in ln for task in ("make-dataset", "run-trainjob", "evaluate") if task in ln]
    # in order; the evaluation three times: its retry policy (2 retries, 10 s backoff) is honoured
    assert finished == [("make-dataset", "SUCCESS"), ("run-trainjob", "SUCCESS")] + [("evaluate", "FAILURE")] * 3, finished


def _names(cluster, namespace: str) -> list[str]:
    return [j["metadata"]["name"] for j in cluster.kubectl_json("get", "trainjobs", "-n", namespace)["items"]]


def _delete_trainjobs(cluster, namespace: str) -> None:
    cluster.kubectl("delete", "trainjobs", "--all", "-n", namespace, "--wait=false")


@pytest.mark.e2e
@pytest.mark.parametrize(("namespace", "inputs", "expected"), [
    ("team-a", {"runtime": "nope"},
     "run_trainjob: runtime 'nope' does not exist in namespace team-a or cluster-wide (runtimes: no-output, torch-distributed)"),
    ("team-b", {}, "run_trainjob: namespace team-b: this step may not read TrainingRuntimes there (403 "),
    ("team-a", {"timeout_seconds": 10}, " did not finish within 10s (status Created)"),  # the least the step takes
    ("team-a", {"runtime": "no-output"}, ("run_trainjob: runtime no-output mounts no output volume, so a checkpoint "
                                         "would not outlive the pods: turn on runtimes.defaults.output.enabled")),
])
def test_on_the_api_server_bad_input_is_one_line(apiserver, tmp_path, capsys, namespace, inputs, expected):
    message = step_fails(capsys, apiserver["sa_kubeconfig"], tmp_path, namespace=namespace, script="print(1)",
                          **inputs)
    assert expected in message, message


def teardown_module() -> None:
    # kfp.local keeps its settings in a process-wide singleton; leave nothing for other tests
    from kfp.local import config

    config.LocalExecutionConfig.instance = None
