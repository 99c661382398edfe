"""The JAX and XGBoost training images and examples, without a cluster: what Trainer injects, where the
runtimes' images resolve on the real node, and the images' pins and default commands."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from trainstack import images, petenv
from trainstack.cluster import node as nodemod


def test_injected_variables_follow_the_plugins():
    assert petenv.jax_env("job", 2, 1) == {"JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "1",
                                           "JAX_COORDINATOR_ADDRESS": "job-node-0-0.job:29500"}
    assert petenv.xgboost_env("job", 2, 0) == {"DMLC_TRACKER_URI": "job-node-0-0.job", "DMLC_TRACKER_PORT": "29500",
                                               "DMLC_TASK_ID": "0", "DMLC_NUM_WORKER": "2"}
    # one worker per GPU on GPU nodes (the task id stays the pod's index)
    assert petenv.xgboost_env("job", 2, 0, {"limits": {"nvidia.com/gpu": 4}})["DMLC_NUM_WORKER"] == "8"
    with pytest.raises(Exception, match="outside a TrainJob of 2"):
        petenv.jax_env("job", 2, 2)


@pytest.mark.parametrize(("built", "runtime_image"), [("jax-cpu", "jax"), ("xgboost-cpu", "xgboost")])
def test_the_runtimes_images_resolve_to_the_built_copy_in_the_clusters_registry(lock, built, runtime_image):
    """global.imageRegistry swaps only the registry: the built image carries the runtime image's repository and
    tag, so every TrainJob on jax-distributed or xgboost-distributed pulls it on the real node."""
    upstream = lock.image(runtime_image)
    assert images.reference(built, lock) == f"{nodemod.MIRROR}/{upstream.repository}:{upstream.tag}"


@pytest.mark.parametrize(("built", "wanted", "unwanted"), [
    ("jax-cpu", {"jax", "jaxlib"}, {"kubernetes"}),
    ("xgboost-cpu", {"xgboost-cpu", "numpy", "scipy"}, {"xgboost", "nvidia-nccl-cu12"}),
])
def test_python_images_pin_every_package_exactly(lock, built, wanted, unwanted):
    entry = images.spec(built, lock)
    names = {str(r).split("==")[0].lower() for r in entry["pythonPackages"]}
    assert all("==" in str(r) for r in entry["pythonPackages"])
    assert wanted <= names and not names & unwanted
    assert entry["kind"] == "python" and images.spec(entry["base"], lock)["kind"] == "debian"


def test_every_debian_image_has_a_default_command_in_its_build_key(lock):
    for name in images.names(lock):
        entry = images.spec(name, lock)
        if entry.get("kind") not in ("debian", "torch", "python"):
            continue
        if entry.get("binaries"):  # a daemon's image (kube-proxy): its binary is the entrypoint
            assert images.recipe(name, lock).entrypoint == [next(iter(entry["binaries"].values()))]
            continue
        assert entry.get("cmd"), f"builtImages.{name} has no default command"
        if entry["kind"] != "torch":  # (torch-cpu's recipe needs the torch wheel)
            rec = images.recipe(name, lock)
            assert rec.cmd == entry["cmd"]
            changed = {**lock.data["builtImages"][name], "cmd": ["sh"]}
            lock.data["builtImages"][name] = changed
            try:
                assert images.recipe(name, lock).key != rec.key  # a new command rebuilds the image
            finally:
                lock.data["builtImages"][name] = entry


@pytest.mark.parametrize("script", ["train_jax.py", "train_xgboost.py", "train_mlx.py"])
def test_examples_have_help_without_their_framework(script):
    result = subprocess.run([sys.executable, str(ROOT / "examples" / script), "--help"], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0 and "usage:" in result.stdout


def test_a_python_image_without_packages_or_a_name_is_one_clear_error(lock):
    from trainstack.errors import UserError

    saved = dict(lock.data["builtImages"]["xgboost-cpu"])
    try:
        lock.data["builtImages"]["xgboost-cpu"] = {k: v for k, v in saved.items() if k != "pythonPackages"}
        with pytest.raises(UserError, match=r"builtImages.xgboost-cpu' \(kind python\) lists no pythonPackages"):
            images.recipe("xgboost-cpu", lock)
        lock.data["builtImages"]["xgboost-cpu"] = {k: v for k, v in saved.items() if k != "image"}
        with pytest.raises(UserError, match=r"builtImages.xgboost-cpu' needs `image:`, or `repository:` and `tag:`"):
            images.reference("xgboost-cpu", lock)
    finally:
        lock.data["builtImages"]["xgboost-cpu"] = saved


def test_xgboost_workers_wait_for_the_trackers_name_to_resolve(tmp_path):
    """A worker that starts before pod 0 is in DNS waits for the name (XGBoost itself fails at once on a
    name that does not resolve); one that never resolves ends with one line naming it, no traceback."""
    import socket

    spec = importlib.util.spec_from_file_location("train_xgboost", ROOT / "examples" / "train_xgboost.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    calls = []

    def late(host, port, type=None):
        calls.append(host)
        if len(calls) < 3:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.244.0.5", port))]

    assert mod.wait_for_host("job-node-0-0.job", 29500, timeout=30, resolve=late) >= 0.9
    assert calls == ["job-node-0-0.job"] * 3
    env = {**os.environ, "DMLC_TRACKER_URI": "no-such-pod-0.invalid", "DMLC_TRACKER_PORT": "29500",
           "DMLC_TASK_ID": "1", "DMLC_NUM_WORKER": "2"}
    # the real script, before it imports XGBoost (absent here): it stops at the name
    result = subprocess.run([sys.executable, str(ROOT / "examples" / "train_xgboost.py"), "--resolve-timeout", "1"],
                            capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(
        "train_xgboost.py: the tracker's address no-such-pod-0.invalid did not resolve within 1s")


def test_the_mlx_image_is_tagged_by_its_mlx_pin_and_built_as_trainers_mpi_runtimes_expect(lock):
    """mlx-cpu: tagged <mlx>-<suite> from its own pin; its root filesystem has OpenMPI and an SSH server
    (`debianPackages`) and the MPI user's setup (`setup: mpi`), and both are in the build key: a change
    rebuilds the image."""
    entry = images.spec("mlx-cpu", lock)
    mlx = next(str(r).split("==")[1] for r in entry["pythonPackages"] if str(r).startswith("mlx=="))
    assert images.reference("mlx-cpu", lock) == f"{nodemod.MIRROR}/trainstack/mlx-cpu:{mlx}-bookworm"
    base = images._base_entry("mlx-cpu", lock)
    assert {"python3", "openmpi-bin", "openssh-server", "openssh-client"} <= set(base["debianPackages"])
    assert base["setup"] == "mpi"
    # what the MPI runtimes' skeleton relies on: sshd's config where the node pods' command reads it, the user
    # the runtimes run as (runAsUser 1000), the port of their readiness probe
    setup = " ".join(images.MPI_SETUP)
    assert "--uid 1000" in setup and "/home/mpiuser/.sshd_config" in setup and "Port 2222" in setup
    key = images.recipe("mlx-cpu", lock).key
    saved = lock.data["builtImages"]["mlx-cpu"]
    try:
        lock.data["builtImages"]["mlx-cpu"] = {**saved, "setup": ""}
        assert images.recipe("mlx-cpu", lock).key != key
        lock.data["builtImages"]["mlx-cpu"] = {**saved, "debianPackages": saved["debianPackages"][:-1]}
        assert images.recipe("mlx-cpu", lock).key != key
        lock.data["builtImages"]["mlx-cpu"] = {**saved, "setup": "openmpi"}
        with pytest.raises(Exception, match="lock entry setup 'openmpi' is not one of mpi"):
            images.recipe("mlx-cpu", lock)
    finally:
        lock.data["builtImages"]["mlx-cpu"] = saved


def test_a_completed_mpi_jobsets_node_jobs_may_be_gone_but_never_a_launchers_or_an_unfinished_ones():
    """JobSet deletes the Jobs its success policy does not wait for once it completes (an MPI runtime's sshd node
    pods): the JobSet check excuses exactly those, on a Completed JobSet with a success policy."""
    from trainstack.e2e.workloadchecks import stopped_at_success

    jobset = {"spec": {"replicatedJobs": [{"name": "node"}, {"name": "launcher"}],
                       "successPolicy": {"operator": "All", "targetReplicatedJobs": ["launcher"]}},
              "status": {"conditions": [{"type": "Completed", "status": "True"}]}}
    assert stopped_at_success(jobset) == {"node"}
    assert stopped_at_success({**jobset, "status": {"conditions": [{"type": "Completed", "status": "False"}]}}) == set()
    assert stopped_at_success({**jobset, "spec": {**jobset["spec"], "successPolicy": {"operator": "All"}}}) == set()
