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

import subprocess
import sys
from importlib import metadata

import pytest

from conftest import ROOT
from support.pipelines import PIPELINES, tp
from trainstack import yamlio

TRAIN_STEP = "run-trainjob"


# ---- the compiled IR ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ir(tmp_path_factory) -> dict:
    path = tmp_path_factory.mktemp("ir") / "train_pipeline.yaml"
    result = subprocess.run([sys.executable, str(PIPELINES / "train_pipeline.py"), "compile", "-o", str(path)],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    docs = list(yamlio.load_all(path.read_text()))  # the whole file, header comment included, is YAML
    assert len(docs) == 1
    return docs[0]


def _tasks(ir: dict) -> dict:
    return ir["root"]["dag"]["tasks"]


def _globals_a_component_needs(component) -> set[str]:
    """Names a component's function reads from outside itself. kfp runs that function's source on its
    own (with kfp's dsl and typing imported), never the module around it: a module-level import the
    function uses is a NameError when the step runs."""
    import builtins
    import inspect
    import symtable
    import textwrap
    import typing

    from kfp import dsl

    source = textwrap.dedent(inspect.getsource(component.python_func))
    [function] = [t for t in symtable.symtable(source, component.name, "exec").get_children()
                  if t.get_name() == component.python_func.__name__]
    # what kfp's executor source imports before the function: kfp, dsl, `from kfp.dsl import *`, `from typing import *`
    provided = set(dir(builtins)) | set(dsl.__all__) | set(typing.__all__) | {"dsl", "kfp"}
    needed: set[str] = set()

    def walk(table) -> None:
        needed.update(s.get_name() for s in table.get_symbols() if s.is_global() and s.is_referenced())
        for child in table.get_children():
            walk(child)

    walk(function)
    return needed - provided


def test_each_component_runs_on_its_own_source():
    from trainjob_component import run_trainjob

    components = (tp.make_dataset, tp.evaluate, run_trainjob)
    assert {c.name for c in components} == {"make-dataset", "evaluate", "run-trainjob"}
    assert {c.name: _globals_a_component_needs(c) for c in components} == {c.name: set() for c in components}


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
                      ("output_mount_path", "output_mount_path"), ("model_version", "model_version")):
        assert params[name]["taskOutputParameter"] == {"producerTask": TRAIN_STEP, "outputParameterKey": key}
    # the model's name and the tracking server are the pipeline's: training registers there, evaluate reads back
    train = tasks[TRAIN_STEP]["inputs"]["parameters"]
    assert train["register_model"] == params["model_name"] == {"componentInputParameter": "model_name"}
    assert train["tracking_uri"] == params["tracking_uri"] == {"componentInputParameter": "tracking_uri"}
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
        "script": "STRING", "script_args": "LIST", "files": "STRUCT", "command": "LIST", "image": "STRING",
        "queue": "STRING", "env": "STRUCT", "timeout_seconds": "NUMBER_INTEGER", "stream_logs": "BOOLEAN",
        "require_output_volume": "BOOLEAN", "register_model": "STRING", "tracking_uri": "STRING"}
    assert [n for n, spec in inputs.items() if not spec.get("isOptional")] == ["namespace"]
    assert all(spec.get("description") for spec in inputs.values()), "every input is documented in the IR"
    outputs = component["outputDefinitions"]["parameters"]
    assert {n: s["parameterType"] for n, s in outputs.items()} == {
        "trainjob": "STRING", "output_claim": "STRING", "output_mount_path": "STRING", "model_version": "STRING"}


def test_train_ddp_travels_unchanged_with_its_arguments(ir):
    script = (ROOT / "examples" / "train_ddp.py").read_text()
    for task in _tasks(ir).values():
        assert task["inputs"]["parameters"]["script"]["runtimeValue"]["constant"] == script
    helper = (ROOT / "examples" / "trainstack_tracking.py").read_text()  # train_ddp.py's MLflow run, beside it
    files = _tasks(ir)[TRAIN_STEP]["inputs"]["parameters"]["files"]["runtimeValue"]["constant"]
    assert files == {"trainstack_tracking.py": helper}
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
def test_a_missing_kubeconfig_is_one_line(tmp_path):
    result = subprocess.run([sys.executable, str(PIPELINES / "train_pipeline.py"), "run", "--kubeconfig",
                             str(tmp_path / "missing"), "--namespace", "team-a"],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 1
    assert result.stderr.strip() == f"error: pipeline {tp.PIPELINE_NAME}: kubeconfig {tmp_path / 'missing'} does not exist"


def teardown_module() -> None:
    # kfp.local keeps its settings in a process-wide singleton; leave nothing for other tests
    from kfp.local import config

    config.LocalExecutionConfig.instance = None
