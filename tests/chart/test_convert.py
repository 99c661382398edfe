"""`trainstack convert`: Training Operator v1 jobs to TrainJobs on the golden runtimes.

The corpus (tests/testdata/convert_v1/) is written in the shapes of training-operator's v1 examples and of
the jobs teams write (GPU, volumes, run policy). Each conversion is checked field by field, every
input field must be carried over or reported, and the output must pass `trainstack validate
--policies` against the real CRD schemas and the rendered dev policies.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import ROOT
from support.cli import assert_one_line_error, run_cli
from trainstack import yamlio
from trainstack.convert import command, v1
from trainstack.errors import UserError

CORPUS = ROOT / "tests" / "testdata" / "convert_v1"
FILES = sorted(CORPUS.glob("*.yaml"))


@pytest.fixture(scope="session")
def runtimes(chart_ready) -> list[v1.Runtime]:
    """The golden runtimes the dev environment installs (the chart rendered with its values)."""
    return v1.load_runtimes("dev")


@pytest.fixture
def convert_one(runtimes):
    def run(name: str) -> v1.Result:
        (result,) = command.convert_files([str(CORPUS / name)], runtimes=runtimes)
        return result
    return run


def on(runtimes: list[v1.Runtime], name: str) -> tuple[str, str]:
    """(framework, accelerator) of the rendered golden runtime `name`: what the choice must match."""
    (runtime,) = [r for r in runtimes if r.name == name]
    return runtime.framework, runtime.accelerator


def patch_pod(trainjob: dict[str, Any]) -> dict[str, Any]:
    (patch,) = trainjob["spec"]["runtimePatches"]
    (job,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    return job["template"]["spec"]["template"]


def fields(result: v1.Result) -> dict[str, str]:
    return {f.field: f.severity for f in result.findings}


@pytest.mark.slow
def test_golden_runtimes_are_the_rendered_ones(runtimes) -> None:
    from trainstack import render

    rendered = [o for o in render.render_objects("dev") if o.get("kind") == "ClusterTrainingRuntime"]
    assert {r.name for r in runtimes} <= {o["metadata"]["name"] for o in rendered}
    assert {r.framework for r in runtimes} >= {"torch", "jax", "xgboost", "mpi"}
    mpi = [r for r in runtimes if r.framework == "mpi"]
    assert mpi and all(r.launcher_is_node and r.trainer_job == "launcher" for r in mpi)
    assert all(v1.choose_runtime(runtimes, r.framework, r.accelerator) for r in runtimes)


@pytest.mark.slow
def test_pytorchjob_master_and_workers_become_nodes(convert_one) -> None:
    result = convert_one("pytorch-simple.yaml")
    job = result.trainjob
    assert result.runtime == "torch-distributed"  # the CPU torch runtime keeps the SDK's default name
    assert job["apiVersion"] == "trainer.kubeflow.org/v1alpha1" and job["kind"] == "TrainJob"
    assert job["metadata"]["name"] == "pytorch-simple" and job["metadata"]["namespace"] == "kubeflow"
    trainer = job["spec"]["trainer"]
    assert trainer["numNodes"] == 2  # Master 1 + Worker 1
    assert trainer["image"] == "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727"
    assert trainer["command"] == ["python3", "/opt/pytorch-mnist/mnist.py", "--epochs=1"]
    assert "runtimePatches" not in job["spec"]
    found = fields(result)
    assert "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].imagePullPolicy" in found
    assert "spec.pytorchReplicaSpecs.Master.restartPolicy" in found


@pytest.mark.slow
def test_gpu_pytorchjob_carries_resources_volumes_scheduling_and_run_policy(convert_one, runtimes) -> None:
    result = convert_one("pytorch-gpu-volumes.yaml")
    job = result.trainjob
    assert on(runtimes, result.runtime) == ("torch", "nvidia")
    trainer = job["spec"]["trainer"]
    assert trainer["numNodes"] == 4 and trainer["numProcPerNode"] == 4
    assert trainer["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == 4
    assert {e["name"] for e in trainer["env"]} == {"NCCL_DEBUG", "WANDB_API_KEY"}
    assert job["spec"]["activeDeadlineSeconds"] == 86400
    meta = job["metadata"]
    assert meta["labels"] == {"trainstack.io/team": "vision", "kueue.x-k8s.io/queue-name": "team-a"}
    assert "kubectl.kubernetes.io/last-applied-configuration" not in meta["annotations"]
    template = patch_pod(job)
    assert template["metadata"]["annotations"] == {"sidecar.istio.io/inject": "false"}
    spec = template["spec"]
    assert spec["serviceAccountName"] == "trainer"
    assert spec["volumes"][0]["persistentVolumeClaim"]["claimName"] == "imagenet"
    assert spec["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert spec["securityContext"]["runAsUser"] == 1000
    (container,) = spec["containers"]
    assert container["name"] == "node"  # the golden runtime's trainer container, read from runtimes/
    assert container["volumeMounts"][0]["mountPath"] == "/data"
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    found = fields(result)
    for dropped in ("spec.runPolicy.cleanPodPolicy", "spec.runPolicy.ttlSecondsAfterFinished",
                    "spec.runPolicy.backoffLimit", "spec.runPolicy.schedulingPolicy.priorityClass",
                    "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].ports"):
        assert found.get(dropped) == "dropped", dropped
    # Master and Worker templates are the same: nothing of the Worker's is reported as lost.
    assert not [f for f in found if f.startswith("spec.pytorchReplicaSpecs.Worker")]


@pytest.mark.slow
def test_elastic_policy_is_reported(convert_one) -> None:
    result = convert_one("pytorch-elastic.yaml")
    assert result.trainjob["spec"]["trainer"]["numNodes"] == 2
    assert "namespace" not in result.trainjob["metadata"]
    assert "torch elastic" in next(f.reason for f in result.findings if f.field == "spec.elasticPolicy")


@pytest.mark.slow
def test_mpijob_launcher_command_and_worker_nodes(convert_one, runtimes) -> None:
    result = convert_one("mpi-horovod.yaml")
    job = result.trainjob
    assert on(runtimes, result.runtime) == ("mpi", "nvidia")
    trainer = job["spec"]["trainer"]
    assert trainer["command"] == ["mpirun"] and trainer["args"][-1] == "/examples/tensorflow_mnist.py"
    assert trainer["numNodes"] == 3  # 2 workers + the launcher, which the golden MPI runtime runs as a node
    assert trainer["numProcPerNode"] == 1  # slotsPerWorker
    assert trainer["resourcesPerNode"] == {"limits": {"nvidia.com/gpu": 1}}
    found = fields(result)
    assert found["spec.mpiReplicaSpecs.Launcher"] == "changed"
    assert "spec.mpiReplicaSpecs.Launcher.template.spec.containers[0].resources.limits.cpu" in found
    assert not any(f.endswith(".name") for f in found)  # container names are not a loss


@pytest.mark.slow
def test_xgboost_worker_differences_are_reported(convert_one, runtimes) -> None:
    result = convert_one("xgboost-iris.yaml")
    assert on(runtimes, result.runtime) == ("xgboost", "cpu") and result.trainjob["spec"]["trainer"]["numNodes"] == 3
    assert result.trainjob["spec"]["trainer"]["args"][0] == "--job_type=Train"
    found = fields(result)
    assert "spec.xgbReplicaSpecs.Worker.template.spec.containers[0].args" in found
    assert "spec.xgbReplicaSpecs.Worker.restartPolicy" in found


@pytest.mark.slow
def test_jax_and_paddle(convert_one, runtimes) -> None:
    jax = convert_one("jax-simple.yaml")
    assert on(runtimes, jax.runtime) == ("jax", "cpu") and jax.trainjob["spec"]["trainer"]["numNodes"] == 2
    paddle = convert_one("paddle-cpu.yaml")
    assert paddle.runtime == "torch-distributed"
    assert paddle.trainjob["spec"]["trainer"]["args"] == ["-m", "paddle.distributed.launch", "run_check"]
    assert fields(paddle)["spec.paddleReplicaSpecs"] == "changed"


def _leaves(node: Any, path: str = "") -> list[tuple[str, Any]]:
    if isinstance(node, dict):
        return [leaf for k, v in node.items() for leaf in _leaves(v, f"{path}.{k}" if path else k)]
    if isinstance(node, list):
        return [leaf for i, v in enumerate(node) for leaf in _leaves(v, f"{path}[{i}]")]
    return [(path, node)]


@pytest.mark.slow
@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_every_field_is_carried_over_or_reported(path: Path, runtimes) -> None:
    """Nothing is dropped silently: each leaf of the v1 object is in the TrainJob or under a reported field."""
    (result,) = command.convert_files([str(path)], runtimes=runtimes)
    out = json.dumps(result.trainjob)
    reported = [f.field for f in result.findings]
    (doc,) = [d for d in yamlio.load_all(path.read_text()) if d]
    structural = {"apiVersion", "kind"}
    kind = v1.KINDS[doc["kind"]]
    roles = [r for r in kind.roles if r in doc["spec"][kind.replica_key]]
    base = "Worker" if doc["kind"] == "MPIJob" else roles[0]
    base_leaves = dict(_leaves(doc))
    for leaf, value in _leaves(doc):
        for role in roles:  # a field the other roles share with the node template is that template's field
            prefix = f"spec.{kind.replica_key}.{role}."
            same = leaf.replace(prefix, f"spec.{kind.replica_key}.{base}.", 1)
            if role != base and leaf.startswith(prefix) and base_leaves.get(same, object()) == value:
                leaf = same
        if leaf in structural or re.search(r"ReplicaSpecs\.\w+\.replicas$|containers\[\d+\]\.name$", leaf):
            continue  # replicas become numNodes; the container is the runtime's (by its name there)
        if any(leaf == r or leaf.startswith((r + ".", r + "[")) for r in reported):
            continue
        assert json.dumps(value) in out or str(value) in out, f"{path.name}: {leaf}={value!r} neither carried nor reported"


@pytest.mark.slow
def test_cli_writes_trainjobs_to_stdout_and_the_report_to_stderr(tmp_path: Path, chart_ready) -> None:
    result = run_cli("convert", str(CORPUS), timeout=60)
    assert result.returncode == 0, result.stderr
    jobs = [d for d in yamlio.load_all(result.stdout) if d]
    assert len(jobs) == len(FILES) and all(j["kind"] == "TrainJob" for j in jobs)
    assert "PyTorchJob team-a/resnet-gpu -> TrainJob on " in result.stderr
    assert "not carried over spec.runPolicy.ttlSecondsAfterFinished" in result.stderr

    as_json = run_cli("convert", str(CORPUS / "mpi-horovod.yaml"), "--output", "json", timeout=60)
    data = json.loads(as_json.stdout)
    assert data["objects"][0]["runtime"] == data["trainjobs"][0]["spec"]["runtimeRef"]["name"]
    assert data["objects"][0]["converted"] and data["trainjobs"][0]["kind"] == "TrainJob"

    out = tmp_path / "out"
    assert run_cli("convert", str(CORPUS / "jax-simple.yaml"), "--out-dir", str(out), timeout=60).returncode == 0
    assert yamlio.load((out / "kubeflow_jaxjob-simple.yaml").read_text())["spec"]["trainer"]["numNodes"] == 2


@pytest.mark.slow
def test_runtime_override(runtimes) -> None:
    gpu = v1.choose_runtime(runtimes, "torch", "nvidia").name
    (result,) = command.convert_files([str(CORPUS / "paddle-cpu.yaml")], runtime=gpu, runtimes=runtimes)
    assert result.trainjob["spec"]["runtimeRef"]["name"] == gpu
    with pytest.raises(UserError, match="no golden runtime named nope"):
        command.convert_files([str(CORPUS / "paddle-cpu.yaml")], runtime="nope", runtimes=runtimes)


@pytest.mark.slow
def test_job_without_a_golden_runtime_is_one_line_and_nothing_written(tmp_path: Path, chart_ready) -> None:
    bad = tmp_path / "cpu-mpi.yaml"
    bad.write_text("apiVersion: kubeflow.org/v1\nkind: MPIJob\nmetadata: {name: cpu-mpi}\nspec:\n  mpiReplicaSpecs:\n"
                   "    Worker:\n      replicas: 2\n      template:\n        spec:\n          containers:\n"
                   "            - {name: w, image: 'example.com/mpi:1.0'}\n")
    result = run_cli("convert", str(CORPUS / "pytorch-simple.yaml"), str(bad), timeout=120)
    assert_one_line_error(result, "cpu-mpi.yaml: MPIJob cpu-mpi:", "no golden runtime for mpi on cpu", "--runtime NAME")
    assert result.stdout == ""


@pytest.mark.slow
def test_converted_corpus_passes_validate_with_the_dev_policies(chart_ready) -> None:
    """The real CRD schemas (with CEL), built-in schemas and the dev environment's admission policies."""
    from trainstack.validate import command as validate

    converted = run_cli("convert", str(CORPUS), timeout=60)
    assert converted.returncode == 0, converted.stderr
    code, out = validate.run(["-", "--env", "dev", "--policies", "--output", "json"], stdin_text=converted.stdout)
    data = json.loads(out)
    trainjob_findings = [f for f in data["findings"] if f.get("kind") == "TrainJob" or "TrainJob" in json.dumps(f)]
    assert code == 0 and data["summary"]["errors"] == 0, json.dumps(trainjob_findings, indent=1)[:4000]
    assert data["summary"]["documents"] >= len(FILES)


@pytest.mark.slow
def test_validate_catches_what_convert_keeps(chart_ready, tmp_path: Path) -> None:
    """The check above can fail: a v1 job with a floating image tag converts, and the image policy rejects it."""
    from trainstack.validate import command as validate

    doc = yamlio.load((CORPUS / "jax-simple.yaml").read_text())
    doc["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["image"] = "docker.io/x/jax:latest"
    path = tmp_path / "latest.yaml"
    path.write_text(yaml.safe_dump(doc))
    converted = run_cli("convert", str(path), timeout=60)
    assert converted.returncode == 0, converted.stderr
    code, out = validate.run(["-", "--env", "dev", "--policies", "--output", "json"], stdin_text=converted.stdout)
    assert code == 1 and "trainstack-image-tag" in out
