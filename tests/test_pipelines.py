"""examples/pipelines: the training step as a Kubeflow Pipelines component, and the example pipeline.

Offline: the pipeline compiles to KFP IR with kfp's compiler and the IR says what a platform team
relies on (steps and their order, the step's inputs and outputs, images and the SDK pin from the
lock, caching and retries); bad input fails the step, run by kfp.local, with one line; the data and
evaluation steps score a real checkpoint of examples/train_ddp.py.

On a cluster (marker e2e; skipped unless TRAINSTACK_PIPELINE_KUBECONFIG names one, e.g. the
kubeconfig `trainstack e2e --keep` prints): the training step submits, waits and reports failures;
with TRAINSTACK_PIPELINE_NODES=real the whole pipeline trains on real pods and the evaluation
reads the real checkpoint; the step works as the ServiceAccount of rbac.yaml and is refused
beyond it.
"""

# No `from __future__ import annotations`: the pipeline defined in a test needs real annotations (kfp).

import json
import math
import os
import subprocess
import sys
import threading
import time
from importlib import metadata
from pathlib import Path

import pytest
import yaml

from conftest import ROOT

PIPELINES = ROOT / "examples" / "pipelines"
sys.path.insert(0, str(PIPELINES))

import train_pipeline as tp  # noqa: E402
import trainjob_component as tc  # noqa: E402

TRAIN_STEP = "run-trainjob"


# ---- the compiled IR ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ir(tmp_path_factory) -> dict:
    path = tmp_path_factory.mktemp("ir") / "train_pipeline.yaml"
    result = subprocess.run([sys.executable, str(PIPELINES / "train_pipeline.py"), "compile", "-o", str(path)],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    docs = list(yaml.safe_load_all(path.read_text()))  # the whole file, header comment included, is YAML
    assert len(docs) == 1
    return docs[0]


def _tasks(ir: dict) -> dict:
    return ir["root"]["dag"]["tasks"]


def test_the_pipeline_is_data_then_training_then_evaluation(ir):
    assert ir["pipelineInfo"]["name"] == tp.PIPELINE_NAME
    tasks = _tasks(ir)
    assert set(tasks) == {"make-dataset", TRAIN_STEP, "evaluate"}
    assert tasks["make-dataset"].get("dependentTasks", []) == []
    assert tasks[TRAIN_STEP]["dependentTasks"] == ["make-dataset"]
    assert sorted(tasks["evaluate"]["dependentTasks"]) == ["make-dataset", TRAIN_STEP]
    # evaluation reads what training output: the TrainJob and its output volume, plus the dataset
    params = tasks["evaluate"]["inputs"]["parameters"]
    for name, key in (("trainjob", "trainjob"), ("output_claim", "output_claim"),
                      ("output_mount_path", "output_mount_path")):
        assert params[name]["taskOutputParameter"] == {"producerTask": TRAIN_STEP, "outputParameterKey": key}
    assert tasks["evaluate"]["inputs"]["artifacts"]["dataset"]["taskOutputArtifact"] == {
        "producerTask": "make-dataset", "outputArtifactKey": "dataset"}
    # the pipeline's result is the evaluation's metrics
    assert ir["root"]["outputDefinitions"]["artifacts"]["Output"]["artifactType"]["schemaTitle"] == "system.Metrics"
    assert ir["root"]["dag"]["outputs"]["artifacts"]["Output"]["artifactSelectors"] == [
        {"outputArtifactKey": "metrics", "producerSubtask": "evaluate"}]


def test_defaults_are_torch_distributed_with_two_nodes_and_the_namespace_is_required(ir):
    inputs = ir["root"]["inputDefinitions"]["parameters"]
    assert inputs["runtime"]["defaultValue"] == "torch-distributed"
    assert inputs["num_nodes"]["defaultValue"] == 2
    assert "defaultValue" not in inputs["namespace"] and not inputs["namespace"].get("isOptional")
    train = _tasks(ir)[TRAIN_STEP]["inputs"]["parameters"]
    for name in ("namespace", "runtime", "num_nodes", "resources_per_node", "queue", "timeout_seconds"):
        assert train[name] == {"componentInputParameter": name}, name


def test_the_training_step_component_interface(ir):
    component = ir["components"]["comp-run-trainjob"]
    inputs = component["inputDefinitions"]["parameters"]
    types = {name: spec["parameterType"] for name, spec in inputs.items()}
    assert types == {
        "namespace": "STRING", "runtime": "STRING", "num_nodes": "NUMBER_INTEGER", "resources_per_node": "STRUCT",
        "script": "STRING", "script_args": "LIST", "command": "LIST", "image": "STRING", "queue": "STRING",
        "env": "STRUCT", "timeout_seconds": "NUMBER_INTEGER", "stream_logs": "BOOLEAN",
        "require_output_volume": "BOOLEAN"}
    assert [n for n, spec in inputs.items() if not spec.get("isOptional")] == ["namespace"]
    assert all(spec.get("description") for spec in inputs.values()), "every input is documented in the IR"
    outputs = component["outputDefinitions"]["parameters"]
    assert {n: s["parameterType"] for n, s in outputs.items()} == {
        "trainjob": "STRING", "output_claim": "STRING", "output_mount_path": "STRING"}


def test_train_ddp_travels_unchanged_with_its_arguments(ir):
    script = (ROOT / "examples" / "train_ddp.py").read_text()
    for task in _tasks(ir).values():
        assert task["inputs"]["parameters"]["script"]["runtimeValue"]["constant"] == script
    args = _tasks(ir)[TRAIN_STEP]["inputs"]["parameters"]["script_args"]["runtimeValue"]["constant"]
    assert args == ["--steps", "{{$.inputs.parameters['pipelinechannel--steps']}}",
                    "--seed", "{{$.inputs.parameters['pipelinechannel--seed']}}",
                    "--features", "{{$.inputs.parameters['pipelinechannel--features']}}"]


def test_caching_and_retries_a_platform_team_expects(ir):
    tasks = _tasks(ir)
    # training is never cached (a cache hit would skip the TrainJob) and never retried by the
    # pipeline (a retry would start a second TrainJob; pod restarts are the runtime's failure policy)
    assert tasks[TRAIN_STEP]["cachingOptions"].get("enableCache", False) is False
    assert "retryPolicy" not in tasks[TRAIN_STEP]
    # the deterministic data step is cached and retried; evaluation reads a volume: retried, not cached
    assert tasks["make-dataset"]["cachingOptions"]["enableCache"] is True
    assert tasks["evaluate"]["cachingOptions"].get("enableCache", False) is False
    for name in ("make-dataset", "evaluate"):
        assert tasks[name]["retryPolicy"]["maxRetryCount"] == 2, name
        assert tasks[name]["retryPolicy"]["backoffDuration"] == "10s", name


def test_step_images_and_the_sdk_pin_come_from_the_lock(ir, lock):
    torch_image = lock.image("torch").reference()
    kubeflow = f"kubeflow{lock.get('python', 'train', 'kubeflow')}"
    executors = ir["deploymentSpec"]["executors"]
    assert set(executors) == {"exec-make-dataset", "exec-run-trainjob", "exec-evaluate"}
    for name, executor in executors.items():
        container = executor["container"]
        assert container["image"] == torch_image, name
        install = container["command"][2]
        assert f"'kfp=={metadata.version('kfp')}'" in install, name
        assert (f"'{kubeflow}'" in install) == (name != "exec-make-dataset"), name


def test_the_installed_kfp_meets_the_lock(lock):
    from trainstack import trainenv

    assert trainenv.satisfies(metadata.version("kfp"), lock.get("python", "test", "kfp"))


def test_rbac_for_a_namespace_is_namespaced_and_least_privilege():
    docs = tp.rbac_manifests("team-b")
    kinds = sorted(f"{d['kind']}/{d['metadata']['name']}" for d in docs)
    assert kinds == sorted([
        "ServiceAccount/trainstack-pipeline", "Role/trainstack-pipeline-train", "Role/trainstack-pipeline-evaluate",
        "RoleBinding/trainstack-pipeline-train", "RoleBinding/trainstack-pipeline-evaluate",
        "ClusterRole/trainstack-pipeline-runtime-reader", "ClusterRoleBinding/trainstack-pipeline-runtime-reader-team-b"])
    for doc in docs:
        if doc["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            assert doc["metadata"]["namespace"] == "team-b", doc["metadata"]
        for subject in doc.get("subjects", []):
            assert subject == {"kind": "ServiceAccount", "name": "trainstack-pipeline", "namespace": "team-b"}
    rules = {d["metadata"]["name"]: d["rules"] for d in docs if d["kind"] in ("Role", "ClusterRole")}
    writes = {"create", "update", "patch", "delete", "deletecollection", "*"}
    granted = {(name, group, resource, verb) for name, rs in rules.items() for r in rs for group in r["apiGroups"]
               for resource in r["resources"] for verb in r["verbs"]}
    assert not any("*" in (group, resource, verb) for _, group, resource, verb in granted)
    assert {g for g in granted if g[3] in writes} == {
        ("trainstack-pipeline-train", "trainer.kubeflow.org", "trainjobs", "create"),
        ("trainstack-pipeline-evaluate", "", "pods", "create"),
        ("trainstack-pipeline-evaluate", "", "pods", "delete")}
    assert {g[2] for g in granted if g[0] == "trainstack-pipeline-runtime-reader"} == {"clustertrainingruntimes"}
    only_train = tp.rbac_manifests("team-b", steps=("train",))
    assert not any("evaluate" in d["metadata"]["name"] for d in only_train)


@pytest.mark.slow
def test_rbac_manifests_validate(tmp_path):
    path = tmp_path / "rbac.yaml"
    path.write_text(yaml.safe_dump_all(tp.rbac_manifests("team-b")))
    result = subprocess.run([sys.executable, "-m", "trainstack", "validate", str(path), str(tp.RBAC)],
                            capture_output=True, text=True, timeout=300, check=False, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


# ---- the steps, run by kfp.local ------------------------------------------------------------------

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
    from trainstack.smoke import free_port

    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{free_port()}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    return path


def _step_fails(capsys, kubeconfig: Path, workdir: Path, **inputs) -> str:
    with pytest.raises(tp.PipelineFailed) as failure:
        tp.run_training_step(kubeconfig, inputs.pop("namespace", "team-a"), workdir=workdir, **inputs)
    log = capsys.readouterr().out
    assert "Traceback" not in log, log[-3000:]
    errors = [ln.strip() for ln in log.splitlines() if ln.strip().startswith("error: ")]
    assert len(errors) == 1, log[-3000:]
    assert errors[0] == f"error: {failure.value}"
    return str(failure.value)


@pytest.mark.slow
@pytest.mark.parametrize(("inputs", "expected"), [
    ({"num_nodes": 0, "script": "print(1)"}, "run_trainjob: num_nodes must be at least 1, got 0"),
    ({"script": "print(1)", "command": ["true"]}, "run_trainjob: give exactly one of script"),
    ({}, "run_trainjob: give exactly one of script"),
    ({"script": "print('$HOME')"}, "run_trainjob: script and script_args must not contain $"),
    ({"script": "print(1)", "script_args": ["a\\b"]}, "must not contain \\"),
    ({"script": "print(1)", "timeout_seconds": 1}, "timeout_seconds must be at least 10"),
])
def test_bad_input_fails_the_step_with_one_line(kubeflow_sdk, nowhere_kubeconfig, tmp_path, capsys, inputs, expected):
    assert expected in _step_fails(capsys, nowhere_kubeconfig, tmp_path, **inputs)


@pytest.mark.slow
def test_an_unreachable_cluster_fails_the_step_with_one_line(kubeflow_sdk, nowhere_kubeconfig, tmp_path, capsys):
    message = _step_fails(capsys, nowhere_kubeconfig, tmp_path, script="print(1)")
    assert message.startswith("run_trainjob: cannot read TrainingRuntime team-a/torch-distributed: "
                              "the API server does not answer"), message


@pytest.mark.slow
def test_a_missing_kubeconfig_is_one_line(tmp_path):
    result = subprocess.run([sys.executable, str(PIPELINES / "train_pipeline.py"), "run", "--kubeconfig",
                             str(tmp_path / "missing"), "--namespace", "team-a"],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 1
    assert result.stderr.strip() == f"error: pipeline {tp.PIPELINE_NAME}: kubeconfig {tmp_path / 'missing'} does not exist"


def _train_locally(steps: int, output_dir: Path) -> Path:
    result = subprocess.run([sys.executable, str(tp.TRAIN_SCRIPT), "--steps", str(steps), "--output-dir",
                             str(output_dir)], capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    return output_dir


def _score(kubeconfig: Path, workdir: Path, *checkpoint_dirs: Path, claim: str = "local-claim") -> list[dict]:
    """make_dataset once, then evaluate on each checkpoint directory (as if the claim were mounted there)."""
    from typing import NamedTuple

    from kfp import dsl

    names = [f"m{i}" for i in range(len(checkpoint_dirs))]

    @dsl.pipeline(name="score-checkpoints")
    def score(claim: str) -> NamedTuple("Scores", [(n, dsl.Metrics) for n in names]):
        script = tp.TRAIN_SCRIPT.read_text()
        data = tp.make_dataset(script=script, seed=0, features=16, samples=256)
        scores = [tp.evaluate(script=script, namespace="team-a", trainjob="local", output_claim=claim,
                              output_mount_path=str(d), dataset=data.outputs["dataset"]).outputs["metrics"]
                  for d in checkpoint_dirs]
        return NamedTuple("Scores", [(n, dsl.Metrics) for n in names])(*scores)

    task, _root, _seconds = tp._run_with_kfp_local(kubeconfig, workdir, lambda: score(claim=claim))
    return [dict(task.outputs[n].metadata) for n in names]


@pytest.mark.slow
@pytest.mark.torch
def test_the_data_and_evaluation_steps_score_a_real_checkpoint(kubeflow_sdk, nowhere_kubeconfig, tmp_path):
    """train_ddp.py trains here (one process); evaluate reads its checkpoint where the claim would be mounted."""
    barely, trained = _score(nowhere_kubeconfig, tmp_path / "run", _train_locally(1, tmp_path / "one-step"),
                             _train_locally(40, tmp_path / "forty-steps"))
    assert (barely["checkpoint_step"], trained["checkpoint_step"]) == (1, 40)
    assert trained["world_size"] == 1
    assert math.isfinite(trained["final_loss"]) and 0 < trained["final_loss"] < barely["final_loss"]


@pytest.mark.slow
@pytest.mark.torch
def test_evaluation_without_an_output_volume_is_one_line(kubeflow_sdk, nowhere_kubeconfig, tmp_path, capsys):
    with pytest.raises(tp.PipelineFailed) as failure:
        _score(nowhere_kubeconfig, tmp_path, tmp_path / "nothing-here", claim="")
    assert str(failure.value) == "evaluate: TrainJob team-a/local has no output volume, so there is no checkpoint to read"
    assert "Traceback" not in capsys.readouterr().out


# ---- against a real API server, the Trainer controller played by the test --------------------------

@pytest.fixture(scope="module")
def apiserver(chart_ready):
    """The pinned kube-apiserver (a LocalCluster with its KWOK pools) with the Trainer CRDs and the golden
    torch-distributed runtime (output volume on). No Trainer controller runs: a test that needs a
    TrainJob to end writes its status condition the way the controller does, and says so."""
    from trainstack import helm, tools
    from trainstack.cluster.local import BINARIES, LocalCluster

    missing = [n for n in BINARIES if tools.find(n) is None]
    if missing:
        pytest.fail(f"not installed: {', '.join(missing)}: run 'make setup'")
    cluster = LocalCluster(name=f"pytest-pipelines-{os.getpid()}")
    cluster.start()
    try:
        for crd in sorted((chart_ready / "crds").glob("*.trainer.kubeflow.org.yaml")):
            cluster.kubectl("apply", "--server-side", "-f", str(crd))

        def torch_runtime(*values: str) -> dict:
            rendered = helm.run(["template", "t", str(chart_ready), "-n", "kubeflow-system", "--kube-version",
                                 cluster.lock.kubernetes_version, "--show-only", "templates/runtimes.yaml",
                                 *values]).stdout
            return next(d for d in yaml.safe_load_all(rendered) if d and d["metadata"]["name"] == "torch-distributed")

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
                             cluster.lock.kubernetes_version, "--show-only", "templates/policies.yaml"]).stdout
        cluster.apply([d for d in yaml.safe_load_all(policies) if d])
        cluster.apply(tp.rbac_manifests("team-a", steps=("train",)))
        config = yaml.safe_load(cluster.kubectl("config", "view", "--raw", "--minify", "--flatten").stdout)
        token = cluster.kubectl("create", "token", "trainstack-pipeline", "-n", "team-a").stdout.strip()
        config["users"] = [{"name": "pipeline", "user": {"token": token}}]
        config["contexts"][0]["context"]["user"] = "pipeline"
        sa = cluster.workdir / "pipeline-sa.kubeconfig"
        sa.write_text(yaml.safe_dump(config))
        yield {"cluster": cluster, "sa_kubeconfig": sa}
    finally:
        cluster.stop()


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
    message = _step_fails(capsys, apiserver["sa_kubeconfig"], tmp_path, script="print(1)", timeout_seconds=120)
    player.join(timeout=5)
    assert message.startswith("TrainJob team-a/") and message.endswith(
        " failed: FailedJobs: jobset failed: job node failed"), message


@pytest.mark.e2e
def test_on_the_api_server_a_policy_denial_is_one_line_with_the_policys_message(apiserver, tmp_path, capsys):
    deadline = time.monotonic() + 30  # a new ValidatingAdmissionPolicy takes effect within seconds
    while True:
        message = _step_fails(capsys, apiserver["sa_kubeconfig"], tmp_path / str(int(time.monotonic())),
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
    ("team-a", {"timeout_seconds": 12}, " did not finish within 12s (status Created)"),
    ("team-a", {"runtime": "no-output"}, "run_trainjob: runtime no-output mounts no output volume, so a checkpoint "
                                         "would not outlive the pods: turn on runtimes.defaults.output.enabled"),
])
def test_on_the_api_server_bad_input_is_one_line(apiserver, tmp_path, capsys, namespace, inputs, expected):
    message = _step_fails(capsys, apiserver["sa_kubeconfig"], tmp_path, namespace=namespace, script="print(1)",
                          **inputs)
    assert expected in message, message


# ---- on a cluster ---------------------------------------------------------------------------------

KUBECONFIG_ENV = "TRAINSTACK_PIPELINE_KUBECONFIG"


@pytest.fixture(scope="module")
def cluster() -> dict:
    """The cluster the lead's run names: TRAINSTACK_PIPELINE_KUBECONFIG, _NAMESPACE (default
    trainstack-pipeline) and _NODES (real: pods really run; kwok: they are simulated)."""
    kubeconfig = os.environ.get(KUBECONFIG_ENV)
    if not kubeconfig:
        pytest.skip(f"no cluster: set {KUBECONFIG_ENV} to a kubeconfig (e.g. the one 'trainstack e2e --keep' prints)")
    nodes = os.environ.get("TRAINSTACK_PIPELINE_NODES", "kwok")
    if nodes not in ("real", "kwok"):
        pytest.fail(f"TRAINSTACK_PIPELINE_NODES must be real or kwok, not {nodes!r}")
    from trainstack import tools

    kubectl = tools.find("kubectl")
    if kubectl is None:
        pytest.fail("kubectl is not installed: run 'make setup'")
    info = {"kubeconfig": str(Path(kubeconfig).resolve()), "kubectl": str(kubectl), "nodes": nodes,
            "namespace": os.environ.get("TRAINSTACK_PIPELINE_NAMESPACE", "trainstack-pipeline")}
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
    defaults = {"script": tp.TRAIN_SCRIPT.read_text(), "script_args": ["--steps", "20"], "timeout_seconds": 600}
    if cluster["nodes"] == "kwok":
        defaults.update(stream_logs=False, require_output_volume=False)
    return {**defaults, **inputs}


@pytest.mark.e2e
def test_the_training_step_submits_waits_and_outputs_the_trainjob(cluster, tmp_path):
    """Real nodes: two pods train. KWOK: the control flow (submit, wait for Complete, outputs) only."""
    out = tp.run_training_step(cluster["kubeconfig"], cluster["namespace"], workdir=tmp_path,
                               **_step_inputs(cluster))
    job = _trainjob(cluster, out["trainjob"])
    assert _condition(job, "Complete").get("status") == "True", job.get("status")
    assert job["spec"]["trainer"]["numNodes"] == 2 and job["spec"]["runtimeRef"]["name"] == "torch-distributed"
    if cluster["nodes"] == "real":
        assert out["output_claim"] and out["output_mount_path"] == "/workspace/output", out


@pytest.mark.e2e
def test_a_failing_trainjob_fails_the_step_with_its_reason(cluster, tmp_path, capsys):
    inputs = _step_inputs(cluster, script="import sys\nsys.exit(3)\n", script_args=[], num_nodes=1)
    if cluster["nodes"] == "kwok":  # KWOK fails the pods of a runtime labelled so (as the e2e suite does)
        from trainstack.cluster.local import FAIL_LABEL

        runtime = json.loads(_kubectl(cluster, "get", "clustertrainingruntime", "torch-distributed", "-o",
                                      "json").stdout)
        for job in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
            job["template"]["spec"]["backoffLimit"] = 0
            job["template"]["spec"]["template"].setdefault("metadata", {}).setdefault("labels", {})[FAIL_LABEL] = "true"
        labels = {k: v for k, v in runtime["metadata"]["labels"].items() if k == "trainer.kubeflow.org/framework"}
        failing = {"apiVersion": runtime["apiVersion"], "kind": "TrainingRuntime", "spec": runtime["spec"],
                   "metadata": {"name": "pipeline-fail-fast", "namespace": cluster["namespace"], "labels": labels}}
        _kubectl(cluster, "apply", "-f", "-", input_text=json.dumps(failing))
        inputs["runtime"] = "pipeline-fail-fast"
    message = _step_fails(capsys, Path(cluster["kubeconfig"]), tmp_path, namespace=cluster["namespace"], **inputs)
    assert message.startswith(f"TrainJob {cluster['namespace']}/") and " failed: " in message, message
    name = message.split()[1].split("/")[1]
    failed = _condition(_trainjob(cluster, name), "Failed")
    assert failed.get("status") == "True" and failed.get("reason") and failed["reason"] in message, (failed, message)


@pytest.mark.e2e
def test_an_unknown_runtime_is_one_line_naming_the_runtimes(cluster, tmp_path, capsys):
    message = _step_fails(capsys, Path(cluster["kubeconfig"]), tmp_path, namespace=cluster["namespace"],
                          **_step_inputs(cluster, runtime="no-such-runtime"))
    assert message.startswith(f"run_trainjob: runtime 'no-such-runtime' does not exist in namespace "
                              f"{cluster['namespace']} or cluster-wide (runtimes: "), message
    assert "torch-distributed" in message


def _service_account_kubeconfig(cluster: dict, namespace: str, path: Path) -> Path:
    """A kubeconfig for the pipeline ServiceAccount: the cluster's server and CA, a fresh token."""
    config = yaml.safe_load(_kubectl(cluster, "config", "view", "--raw", "--minify", "--flatten").stdout)
    token = _kubectl(cluster, "create", "token", "trainstack-pipeline", "-n", namespace,
                     "--duration", "1h").stdout.strip()
    config["users"] = [{"name": "pipeline", "user": {"token": token}}]
    config["contexts"][0]["context"]["user"] = "pipeline"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.e2e
def test_the_step_works_as_the_pipeline_service_account_and_nothing_more(cluster, tmp_path, capsys):
    ns = cluster["namespace"]
    _kubectl(cluster, "apply", "-f", "-", input_text=yaml.safe_dump_all(tp.rbac_manifests(ns, steps=("train",))))
    kubeconfig = _service_account_kubeconfig(cluster, ns, tmp_path / "sa.kubeconfig")

    out = tp.run_training_step(kubeconfig, ns, workdir=tmp_path / "ok", **_step_inputs(cluster))
    assert _condition(_trainjob(cluster, out["trainjob"]), "Complete").get("status") == "True"

    def can(*args: str) -> bool:
        return _kubectl(cluster, "auth", "can-i", *args, check=False, kubeconfig=str(kubeconfig)).stdout.strip() == "yes"

    assert can("create", "trainjobs.trainer.kubeflow.org", "-n", ns)
    assert can("get", "pods/log", "-n", ns) and can("list", "events", "-n", ns)
    assert can("list", "clustertrainingruntimes.trainer.kubeflow.org")
    for verb, resource in (("delete", "trainjobs.trainer.kubeflow.org"), ("update", "trainjobs.trainer.kubeflow.org"),
                           ("create", "pods"), ("create", "trainingruntimes.trainer.kubeflow.org"),
                           ("get", "secrets"), ("create", "pods/exec")):
        assert not can(verb, resource, "-n", ns), (verb, resource)
    assert not can("patch", "clustertrainingruntimes.trainer.kubeflow.org")
    assert not can("create", "trainjobs.trainer.kubeflow.org", "-n", "default")

    # a namespace the step may not use: one line, before anything is created
    message = _step_fails(capsys, kubeconfig, tmp_path / "other", namespace="default", **_step_inputs(cluster))
    assert message.startswith("run_trainjob: namespace default: this step may not read TrainingRuntimes there (403 "), message


@pytest.mark.e2e
def test_the_pipeline_trains_on_real_pods_and_evaluates_the_real_checkpoint(cluster, tmp_path):
    if cluster["nodes"] != "real":
        pytest.skip("KWOK pods do not run: no checkpoint exists to evaluate (the training step's control flow "
                    "is what the other e2e tests check there)")
    ns = cluster["namespace"]
    _kubectl(cluster, "apply", "-f", "-", input_text=yaml.safe_dump_all(tp.rbac_manifests(ns)))
    kubeconfig = _service_account_kubeconfig(cluster, ns, tmp_path / "sa.kubeconfig")
    result = tp.run_local(kubeconfig, ns, workdir=tmp_path / "run", steps=40, timeout_seconds=900)
    job = _trainjob(cluster, result["trainjob"])
    assert _condition(job, "Complete").get("status") == "True"
    assert result["metrics"]["checkpoint_step"] == 40 and result["metrics"]["world_size"] == 2, result
    # the same evaluation of a model trained one step here is the bar the real training must beat
    [baseline] = _score(kubeconfig, tmp_path / "baseline", _train_locally(1, tmp_path / "one-step"))
    assert math.isfinite(result["final_loss"]) and result["final_loss"] < baseline["final_loss"], (result, baseline)
    print(json.dumps({"pipeline_seconds": result["seconds"], "final_loss": result["final_loss"]}))


def teardown_module() -> None:
    # kfp.local keeps its settings in a process-wide singleton; leave nothing for other tests
    from kfp.local import config

    config.LocalExecutionConfig.instance = None
