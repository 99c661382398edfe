"""examples/sdk_finetune.py: the Kubeflow SDK's TorchTune BuiltinTrainer against trainstack's runtimes.

No cluster is contacted: the SDK's own KubernetesBackend code reads the golden runtimes as the
chart renders them for prod and builds the TrainJob TrainerClient.train would create; the
policies of prod must then admit it. What the Trainer controller does with it next (recipe and
config, the initializers' downloads, `tune run` on GPUs) needs a cluster with GPUs.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT
from support.cli import run_cli
from support.runtimes import by_name, docs_of_kind

# the first real-node group (tests/e2e/conftest.py): no cluster at all, moved there to even the groups out

SCRIPT = ROOT / "examples" / "sdk_finetune.py"
TORCHTUNE = ("torchtune-llama3.2-1b", "torchtune-llama3.2-3b", "torchtune-qwen2.5-1.5b")
TEAM = ("--namespace", "team-a", "--label", "trainstack.io/team=team-a", "--label", "kueue.x-k8s.io/queue-name=team-a")
pytestmark = pytest.mark.slow  # needs the Kubeflow SDK that `make setup` installs, and helm


@pytest.fixture(scope="module", autouse=True)
def sdk_installed() -> None:
    probe = subprocess.run([sys.executable, "-c", "import kubeflow.trainer"], check=False, capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.fail("the Kubeflow SDK is not installed: run 'make setup' (it runs 'trainstack smoke install')")


@pytest.fixture(scope="module")
def prod_runtimes(chart_ready, tmp_path_factory):
    result = run_cli("render", "--env", "prod")
    assert result.returncode == 0, result.stderr
    path = tmp_path_factory.mktemp("prod") / "rendered.yaml"
    path.write_text(result.stdout)
    return path


def _sdk(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], check=False, capture_output=True, text=True,
                          timeout=300, env=dict(os.environ), cwd=ROOT)


@pytest.fixture(scope="module")
def example():
    """examples/sdk_finetune.py as a module: its dry runs in this process (the SDK imports once)."""
    spec = importlib.util.spec_from_file_location("sdk_finetune", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _dry_run(example, runtime_file, *args: str) -> dict:
    job = example.dry_run_trainjob(example.parse_args(["--dry-run", "--runtime-file", str(runtime_file), *args]))
    return json.loads(json.dumps(job))  # exactly what --dry-run prints


def test_the_sdk_reads_the_torchtune_runtimes_as_builtin_trainers(prod_runtimes):
    """What TrainerClient.list_runtimes() shows a user, from the golden runtimes as prod ships them."""
    from kubeflow.trainer import TrainerType
    from kubeflow.trainer.backends.kubernetes.backend import KubernetesBackend
    from kubeflow_trainer_api import models

    backend = object.__new__(KubernetesBackend)
    found = by_name(docs_of_kind(prod_runtimes.read_text(), "ClusterTrainingRuntime"))
    assert set(TORCHTUNE) <= set(found)
    for name, runtime in found.items():
        parsed = backend._KubernetesBackend__get_runtime_from_cr(models.TrainerV1alpha1ClusterTrainingRuntime.from_dict(runtime))
        builtin = name in TORCHTUNE
        assert (parsed.trainer.trainer_type == TrainerType.BUILTIN_TRAINER) == builtin, name
        if builtin:
            assert parsed.trainer.command == ("tune", "run")
            # upstream's two GPUs (the SDK reads the integer limit as "2.0", as it does upstream's)
            assert (parsed.trainer.device, float(parsed.trainer.device_count)) == ("gpu", 2), name
            assert parsed.trainer.image.endswith("/kubeflow/trainer/torchtune-trainer:v2.3.0")


def test_builtin_trainer_trainjobs_are_admitted_in_prod(example, prod_runtimes, tmp_path):
    files = []
    for runtime in TORCHTUNE:
        job = _dry_run(example, prod_runtimes, "--runtime", runtime, *TEAM)
        spec = job["spec"]
        assert spec["runtimeRef"] == {"name": runtime, "kind": "ClusterTrainingRuntime"}
        assert spec["trainer"]["command"] == ["tune", "run"]
        assert {"dataset=torchtune.datasets.instruct_dataset", "dataset.source=parquet",
                "dataset.split=train[:1000]"} <= set(spec["trainer"]["args"])
        assert "initializer" not in spec  # the runtime's own dataset and model sources apply
        target = tmp_path / f"{runtime}.yaml"
        target.write_text(yaml.safe_dump(job))
        files.append(str(target))
    # upstream's notebook call: both initializers, a LoRA fine-tune on one GPU with its memory
    job = _dry_run(example, prod_runtimes, "--runtime", "torchtune-llama3.2-1b", "--dataset", "hf://tatsu-lab/alpaca/data",
                   "--model", "hf://meta-llama/Llama-3.2-1B-Instruct", "--access-token", "hf_example",
                   "--gpu", "1", "--memory", "64Gi", "--lora", "--name", "llama-lora", *TEAM)
    spec = job["spec"]
    assert spec["initializer"]["dataset"]["storageUri"] == "hf://tatsu-lab/alpaca/data"
    assert spec["initializer"]["model"]["storageUri"] == "hf://meta-llama/Llama-3.2-1B-Instruct"
    assert {"name": "ACCESS_TOKEN", "value": "hf_example"} in spec["initializer"]["model"]["env"]
    assert "dataset.data_dir=/workspace/dataset/data" in spec["trainer"]["args"]
    assert "model.lora_attn_modules=[q_proj,v_proj]" in spec["trainer"]["args"]
    assert float(spec["trainer"]["resourcesPerNode"]["limits"]["nvidia.com/gpu"]) == 1
    (tmp_path / "llama-lora.yaml").write_text(yaml.safe_dump(job))
    files.append(str(tmp_path / "llama-lora.yaml"))
    result = run_cli("validate", "--env", "prod", "--policies", "--output", "json", *files)
    findings = [f for f in json.loads(result.stdout)["findings"] if str(tmp_path) in f.get("file", "")]
    assert result.returncode == 0 and findings == [], findings


def test_the_custom_trainer_runtimes_refuse_a_builtin_trainer(prod_runtimes):
    result = _sdk("--dry-run", "--runtime-file", str(prod_runtimes), "--runtime", "torch-distributed")
    assert result.returncode == 1
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "BuiltinTrainer can't be used" in lines[0], result.stderr


def test_usage_errors_are_one_line(example, prod_runtimes):
    result = _sdk("--dry-run")
    assert result.returncode == 2 and "--runtime-file" in result.stderr
    with pytest.raises(SystemExit) as missing:
        _dry_run(example, prod_runtimes, "--runtime", "torchtune-llama3.3-70b")
    assert str(missing.value).startswith(f"error: {prod_runtimes}: no ClusterTrainingRuntime named torchtune-llama3.3-70b")
