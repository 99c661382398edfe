"""The jax-cpu, xgboost-cpu and mlx-cpu images, built for real into the cluster's registry (its storage is
the trainstack cache's, so `trainstack e2e` finds them built): their config (default command, working
directory, user, build key), zstd layers, and that their root filesystem runs the examples as user
1000 with no network, as a pod runs them (mlx-cpu: also two ranks under its own mpirun, and the MPI
user's ssh setup). Run it under `flock /tmp/realnode.lock` (the registry)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from conftest import ROOT
from trainstack import imagelayers, images, paths
from trainstack import lock as lockmod
from trainstack.cluster import node as nodemod
from trainstack.cluster import sandbox as sandboxmod

pytestmark = pytest.mark.frameworks


@pytest.fixture(scope="module")
def builder(tmp_path_factory):
    lock = lockmod.load()
    work = tmp_path_factory.mktemp("registry")
    box = sandboxmod.Sandbox(name=f"pytest-img-{os.getpid()}", workdir=work / "sandbox")
    box.create()
    try:
        node = nodemod.RealNode(box, work / "pki", api_port=1, cache=paths.cache_dir() / "node", lock=lock)
        node.dir.mkdir(parents=True, exist_ok=True)
        node.write_registry_config()
        node.start_registry()
        yield images.Builder(box.enter_net(), lock)
    finally:
        box.destroy()


def run_in_image(root, command: str) -> subprocess.CompletedProcess:
    """COMMAND (bash) in the image's root filesystem as its user, in its working directory, without a network."""
    env = ["/usr/bin/env", "-i", "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "PYTHONUNBUFFERED=1"]
    return subprocess.run(["unshare", "--net", "chroot", "--userspec=1000:1000", str(root), *env, "/bin/bash",
                           "-c", f"cd /workspace && {command}"], capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize(("name", "script", "args", "absent"), [
    ("jax-cpu", "train_jax.py", "--steps 30", "kubernetes"),
    ("xgboost-cpu", "train_xgboost.py", "--rounds 10", "torch"),
    ("mlx-cpu", "train_mlx.py", "--steps 30", "torch"),
])
def test_framework_image_has_a_command_and_trains(builder, export, name, script, args, absent):
    lock = builder.lock
    built = builder.ensure(name)
    print(f"{name}: {built.action} in {built.seconds:.1f}s, {built.size / 1e6:.1f} MB compressed")
    assert built.reference == images.reference(name, lock) and built.size > 0
    config = json.loads(builder.crane_ok("config", built.reference))["config"]
    assert config["Cmd"] == ["/bin/bash"] and not config.get("Entrypoint")
    assert (config["WorkingDir"], config["User"]) == ("/workspace", "1000:1000")
    assert config["Labels"][images.KEY_LABEL] == images.recipe(name, lock).key
    layers = json.loads(builder.crane_ok("manifest", built.reference))["layers"]
    assert len(layers) == 2 and {layer["mediaType"] for layer in layers} == {imagelayers.ZSTD_MEDIA_TYPE}
    assert builder.ensure(name).action == "up to date"

    root = export(built.reference)
    for file in (script, "trainstack_tracking.py"):  # the script and its tracking helper, as the SDK ships them
        shutil.copy(ROOT / "examples" / file, root / "workspace" / file)
    result = run_in_image(root, f"python {script} {args}")
    assert result.returncode == 0, result.stderr[-2000:]
    done = [json.loads(ln) for ln in result.stdout.splitlines() if ln.startswith('{"event": "done"')]
    assert len(done) == 1 and done[0]["world_size"] == 1
    probe = f"import importlib.util as u, sys; sys.exit(u.find_spec('{absent}') is not None)"
    missing = run_in_image(root, f'python -c "{probe}"')
    assert missing.returncode == 0, f"{name} has {absent}"
    # MLflow's client (the lock's tracking.client), for the examples' tracking
    client = run_in_image(root, "python -c 'import mlflow; print(mlflow.__version__)'")
    pinned = next(p for p in lock.get("tracking", "client") if p.startswith("mlflow-skinny=="))
    assert client.returncode == 0 and client.stdout.strip() == pinned.split("==")[1], client.stderr[-1000:]


@pytest.fixture(scope="module")
def export(builder, tmp_path_factory):
    """An image's root filesystem, unpacked once per module (mlx-cpu's serves two tests; unpacking an image
    takes several CPU-seconds)."""
    roots: dict[str, object] = {}

    def unpacked(reference: str):
        if reference not in roots:
            work = tmp_path_factory.mktemp("image")
            root = work / "root"
            root.mkdir()
            exported = builder.crane_run("export", reference, str(work / "fs.tar"), timeout=600)
            assert exported.returncode == 0, exported.stderr
            subprocess.run(["tar", "-xf", str(work / "fs.tar"), "-C", str(root)], check=True)
            (work / "fs.tar").unlink()
            roots[reference] = root
        return roots[reference]

    return unpacked


def test_the_tracking_server_image_serves_mlflow_with_its_auth_app_postgres_driver_and_exporter(builder, export):
    lock = builder.lock
    built = builder.ensure("mlflow")
    print(f"mlflow: {built.action} in {built.seconds:.1f}s, {built.size / 1e6:.1f} MB compressed")
    assert built.reference == images.reference("mlflow", lock)
    config = json.loads(builder.crane_ok("config", built.reference))["config"]
    assert config["Cmd"] == ["python3", "-m", "mlflow"] and config["User"] == "1000:1000"
    root = export(built.reference)
    # create_engine loads the driver SQLAlchemy picks for a plain postgresql:// URI (docs/tracking.md's form;
    # SQLAlchemy 2.1 picks psycopg 3), without connecting; the exporter `--expose-prometheus` loads, and the
    # multiprocess collector the metrics sidecar serves
    probe = ("import mlflow, mlflow.server.auth, flask_wtf, sqlalchemy; "
             "import mlflow.server.prometheus_exporter, prometheus_client.multiprocess; "
             "sqlalchemy.create_engine('postgresql://u:p@127.0.0.1/mlflow'); "
             "from mlflow.server import get_app_client; print(mlflow.__version__)")
    result = run_in_image(root, f'python -c "{probe}"')
    server = next(p for p in lock.get("tracking", "server") if p.startswith("mlflow[auth]=="))
    assert result.returncode == 0 and result.stdout.strip().splitlines()[-1] == server.split("==")[1], \
        result.stderr[-2000:]


def test_the_mlx_image_runs_two_ranks_under_its_mpirun_and_is_set_up_for_trainers_mpi_plugin(builder, export):
    """mlx-cpu's root filesystem: mpirun (OpenMPI) starts two ranks of examples/train_mlx.py as user 1000 in a
    network namespace of their own (loopback only), MLX joins them in one MPI group through the libmpi.so link,
    and they end with the same weights; the node pods' sshd config and the launcher's ssh config are where the
    runtime's command and Trainer's MPI plugin expect them, for the user the runtimes run as; no host key."""
    built = builder.ensure("mlx-cpu")
    root = export(built.reference)
    for file in ("train_mlx.py", "trainstack_tracking.py"):
        shutil.copy(ROOT / "examples" / file, root / "workspace" / file)
    inner = (f"chroot --userspec=1000:1000 {root} /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/tmp "
             "/bin/bash -c 'cd /workspace && mpirun -np 2 python train_mlx.py --steps 100'")
    # hwloc reads /proc and /sys; OpenMPI's runtime needs an interface that is up (the namespace's loopback)
    setup = (f"ip link set lo up && mount -t proc proc {root}/proc && mount --rbind /sys {root}/sys "
             f"&& mount -t tmpfs tmpfs {root}/tmp")
    result = subprocess.run(["unshare", "--net", "--mount", "--pid", "--fork", "bash", "-c", f"{setup} && {inner}"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    events = [json.loads(ln) for ln in result.stdout.splitlines() if ln.startswith("{")]
    starts = sorted((e for e in events if e["event"] == "start"), key=lambda e: e["rank"])
    dones = [e for e in events if e["event"] == "done"]
    assert [(s["rank"], s["world_size"], s["allreduce"]) for s in starts] == [(0, 2, 3.0), (1, 2, 3.0)]
    assert len(dones) == 2 and len({d["weights_sha256"] for d in dones}) == 1
    assert dones[0]["loss_last"] < 1e-3 < dones[0]["loss_first"]
    passwd = {line.split(":")[0]: line.split(":") for line in (root / "etc/passwd").read_text().splitlines()}
    assert passwd["mpiuser"][2:4] == ["1000", "1000"] and passwd["mpiuser"][5] == "/home/mpiuser"
    sshd = (root / "home/mpiuser/.sshd_config").read_text().splitlines()
    assert {"Port 2222", "HostKey /home/mpiuser/.ssh/id_rsa", "StrictModes no"} <= set(sshd)
    assert (root / "home/mpiuser/.sshd_config").stat().st_uid == 1000
    client = (root / "etc/ssh/ssh_config.d/mpi.conf").read_text()
    assert "Port 2222" in client and "StrictHostKeyChecking no" in client
    assert not list((root / "etc/ssh").glob("ssh_host_*")), "a host key was left in the image"
