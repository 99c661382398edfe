"""The torch DDP smoke: PET_* follows the Trainer controller's rules, and a real two-node run trains."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT
from support.cli import assert_one_line_error, run_cli
from trainstack import smoke, trainenv
from trainstack.errors import UserError

TORCH_2_15_REQUIRES = """\
Requires-Dist: filelock
Requires-Dist: typing-extensions>=4.13.0
Requires-Dist: setuptools>=77.0.3
Requires-Dist: sympy>=1.13.3
Requires-Dist: networkx>=2.5.1
Requires-Dist: jinja2
Requires-Dist: fsspec>=0.8.5
Requires-Dist: cuda-toolkit[cublas,cudart,cufft,cufile,cupti,cusolver,cusparse,nvjitlink,nvrtc,nvtx]==13.2.2; platform_system == "Linux"
Requires-Dist: cuda-bindings<14,>=13.0.3; platform_system == "Linux" and python_version < "3.15"
Requires-Dist: nvidia-cudnn-cu13==9.26.0.51; platform_system == "Linux"
Requires-Dist: nvidia-nccl-cu13==2.30.7; platform_system == "Linux"
Requires-Dist: triton~=3.9.0; platform_system == "Linux" and python_version < "3.16"
Requires-Dist: optree>=0.13.0; extra == "optree"
"""


# ---- PET_* as the controller injects it (torch plugin, v2.3.0; cases from upstream torch_test.go) ----

def test_pet_env_for_a_cpu_node_with_a_cpu_2_request():
    env = smoke.pet_env("mnist", num_nodes=2, node_rank=1, resources={"requests": {"cpu": "2"}})
    assert env == {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "2", "PET_NODE_RANK": "1",
                   "PET_MASTER_ADDR": "mnist-node-0-0.mnist", "PET_MASTER_PORT": "29500"}


@pytest.mark.parametrize(("resources", "expected"), [
    ({"limits": {"cpu": "4"}}, "4"),                            # nproc_per_node=auto with CPU limit
    ({}, "1"),                                                  # ... with no CPU resources
    ({"requests": {"cpu": "3"}}, "3"),                          # ... with CPU request but no limit
    ({"limits": {"cpu": "2.5"}}, "3"),                          # ... with millicore CPU limit (rounded up)
    ({"limits": {"cpu": "2500m"}}, "3"),                        # ... in m format
    ({"limits": {"cpu": "0.7"}}, "1"),                          # ... with fractional CPU limit
    ({"limits": {"cpu": "3.7"}}, "4"),                          # nproc_per_node=cpu with fractional CPU
    ({"requests": {"cpu": "2"}, "limits": {"cpu": "8"}}, "2"),  # the request wins over the limit
    ({"requests": {"cpu": "0"}, "limits": {"cpu": "6"}}, "6"),  # a zero request falls back to the limit
])
def test_nproc_per_node_on_cpu_nodes(resources, expected):
    assert smoke.pet_env("job", 1, 0, resources)["PET_NPROC_PER_NODE"] == expected


@pytest.mark.parametrize("resources", [
    {"limits": {"nvidia.com/gpu": 4}},
    {"requests": {"example.com/gpu": "2"}},
    {"limits": {"cpu": "6", "amd.com/GPU": "2"}},
    {"requests": {"cpu": "8", "memory": "32Gi"}, "limits": {"nvidia.com/gpu": "1"}},
])
def test_gpu_nodes_leave_nproc_per_node_to_torchrun(resources):
    assert smoke.pet_env("job", 2, 0, resources)["PET_NPROC_PER_NODE"] == "auto"
    assert smoke.gpus_per_node(resources) >= 1


def test_explicit_num_proc_per_node_wins_over_resources():
    assert smoke.pet_env("job", 1, 0, {"limits": {"cpu": "8"}}, num_proc_per_node=3)["PET_NPROC_PER_NODE"] == "3"
    assert smoke.pet_env("job", 1, 0, {"limits": {"nvidia.com/gpu": 8}}, num_proc_per_node=2)["PET_NPROC_PER_NODE"] == "2"


def test_local_master_and_bad_input():
    env = smoke.pet_env("job", 3, 2, master_addr="127.0.0.1", master_port=4321)
    assert (env["PET_MASTER_ADDR"], env["PET_MASTER_PORT"], env["PET_NNODES"]) == ("127.0.0.1", "4321", "3")
    with pytest.raises(UserError, match="outside a TrainJob of 2"):
        smoke.pet_env("job", 2, 2)
    with pytest.raises(UserError, match=r"resources.requests.cpu: 'two' is not a Kubernetes quantity"):
        smoke.pet_env("job", 1, 0, {"requests": {"cpu": "two"}})


# ---- the install step (no network: only the parts that decide what to install) ----

def test_cpu_profile_drops_only_the_lazily_loaded_cuda_parts(tmp_path):
    import zipfile

    wheel = tmp_path / "torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("torch-2.15.0.dist-info/METADATA", "Name: torch\n" + TORCH_2_15_REQUIRES)
    requirements = trainenv.wheel_requirements(wheel)
    assert not any("optree" in r for r in requirements)
    kept = trainenv.cpu_requirements(requirements)
    names = [r.split("[")[0].split(";")[0].split("=")[0].split(">")[0].split("<")[0].split("~")[0] for r in kept]
    assert "triton" not in names and "cuda-bindings" not in names
    assert {"filelock", "sympy", "nvidia-cudnn-cu13", "nvidia-nccl-cu13", "cuda-toolkit"} <= set(names)
    toolkit = next(r for r in kept if r.startswith("cuda-toolkit"))
    assert toolkit == ('cuda-toolkit[cublas,cudart,cufft,cufile,cupti,cusparse,nvjitlink,nvrtc]==13.2.2; '
                       'platform_system == "Linux"')


def test_version_specifiers():
    assert trainenv.satisfies("2.15.0+cu132", ">=2.5")
    assert not trainenv.satisfies("2.4.1", ">=2.5")
    assert trainenv.satisfies("0.5.0", ">=0.5.0,<1")
    assert not trainenv.satisfies("1.0", ">=0.5.0,<1")
    assert trainenv.satisfies("2.15.0+cu132", "==2.15.0")  # PEP 440: a local label matches its release
    assert trainenv.satisfies("1.4", "~=1.0") and not trainenv.satisfies("2.0", "~=1.0")
    assert not trainenv.satisfies("2.6.0rc1", ">=2.6")  # a pre-release is below its release
    with pytest.raises(UserError, match="unsupported version specifier"):
        trainenv.satisfies("1.0", "=>1.0")
    with pytest.raises(UserError, match="cannot read version"):
        trainenv.satisfies("not-a-version", ">=1")


def test_missing_torch_is_one_clear_line(tmp_path):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True)
    result = run_cli("smoke", "train", "--python", str(tmp_path / "bare" / "bin" / "python"))
    assert_one_line_error(result, "torch is not installed", "make smoke-train")


def test_the_training_script_has_nothing_a_shell_here_document_would_change():
    text = (ROOT / "examples" / "train_ddp.py").read_text()
    assert not [c for c in ("$", "`", "\\") if c in text]


# ---- real runs (torch installed by `make setup` / `trainstack smoke install`) ----

def test_a_used_workdir_is_refused(tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    result = run_cli("smoke", "train", "--workdir", str(tmp_path))
    assert_one_line_error(result, f"--workdir {tmp_path} exists and is not an empty folder")
    assert (tmp_path / "keep.txt").read_text() == "mine"


def _dist(root, name: str, version: str, record: str = "x\n") -> None:
    info = root / f"{name}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "RECORD").write_text(record)


def test_environment_key_changes_with_any_installed_package(tmp_path):
    from trainstack import trainenv

    _dist(tmp_path, "foo", "1.0")
    key = trainenv._environment_key([str(tmp_path)])
    assert trainenv._environment_key([str(tmp_path)]) == key
    _dist(tmp_path, "bar", "2.0")
    with_bar = trainenv._environment_key([str(tmp_path)])
    assert with_bar != key
    _dist(tmp_path, "foo", "1.0", record="x\ny\n")  # reinstalled with other files
    assert trainenv._environment_key([str(tmp_path)]) not in (key, with_bar)


def test_torch_import_check_is_remembered_until_the_environment_changes(tmp_path, monkeypatch):
    import subprocess

    from trainstack import trainenv

    calls = []
    result = {"rc": 1}

    def check(python=None):
        calls.append(1)
        return subprocess.CompletedProcess([], result["rc"], "", "")

    env_key = {"k": "one"}
    monkeypatch.setattr(trainenv, "torch_import_check", check)
    monkeypatch.setattr(trainenv, "_environment_key", lambda path=None: env_key["k"])
    monkeypatch.setattr(trainenv.sys, "prefix", str(tmp_path))
    assert trainenv.torch_importable() is False  # a failed import is never remembered
    assert trainenv.torch_importable() is False and len(calls) == 2
    result["rc"] = 0
    assert trainenv.torch_importable() is True and len(calls) == 3
    assert trainenv.torch_importable() is True and len(calls) == 3  # remembered
    env_key["k"] = "two"  # a package changed: checked again
    assert trainenv.torch_importable() is True and len(calls) == 4
