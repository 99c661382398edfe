"""The real node's plumbing on this host: its namespaces, the port forwarder, the image builds, and
teardown after a crash. The whole suite on the real node runs in test_e2e_local.py."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import ROOT
from support.cli import run_cli
from trainstack import imagelayers, images, paths, tools
from trainstack import lock as lockmod
from trainstack.cluster import node as nodemod
from trainstack.cluster import sandbox as sandboxmod
from trainstack.cluster.local import free_port

from .test_e2e_local import processes_mentioning

pytestmark = pytest.mark.e2e

HOST_SYSCTLS = ("vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops")


def host_sysctls() -> dict[str, str]:
    return {k: (Path("/proc/sys") / k).read_text().strip() for k in HOST_SYSCTLS}


def leftovers(name: str) -> list[str]:
    """Everything a sandbox could leave: its network namespace, cgroups, owner record, processes."""
    box = sandboxmod.Sandbox(name=name, workdir=Path("/nonexistent"))
    found = []
    if box.netns_path.exists():
        found.append(str(box.netns_path))
    found += [str(h / box.netns) for h in sandboxmod.controllers() if (h / box.netns).exists()]
    if (sandboxmod.OWNERS_DIR / f"{box.netns}.json").exists():
        found.append("owner record")
    return found


def listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def sandbox(tmp_path):
    box = sandboxmod.Sandbox(name=f"pytest-{os.getpid()}", workdir=tmp_path / "sandbox")
    box.create()
    try:
        yield box
    finally:
        box.destroy()


def test_sandbox_isolates_and_forwards_and_teardown_leaves_nothing(sandbox, tmp_path):
    before = host_sysctls()
    # a server inside the cluster's namespace, on its loopback
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "hello.txt").write_text("from inside\n")
    inner = 8000
    server = subprocess.Popen([*sandbox.enter(), sys.executable, "-m", "http.server", str(inner), "--bind", "127.0.0.1",
                               "--directory", str(tmp_path / "www")], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    host_port = free_port()
    forward = subprocess.Popen([sys.executable, "-m", "trainstack.cluster.forward", str(sandbox.netns_path),
                                f"{host_port}:{inner}"], stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": str(ROOT / "scripts")})
    try:
        assert forward.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 20
        while True:
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{host_port}/hello.txt", timeout=2).read().decode()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        assert body == "from inside\n"
        # no route out: the namespace's default route leads to a neighbour that does not exist
        routes = subprocess.run(["ip", "-n", sandbox.netns, "route"], capture_output=True, text=True).stdout
        assert f"default via {sandboxmod.DEAD_END}" in routes
        # kubelet's sysctls are faked inside, untouched outside
        inside = subprocess.run([*sandbox.enter(), "cat", "/proc/sys/vm/overcommit_memory"], capture_output=True,
                                text=True).stdout.strip()
        assert inside == sandboxmod.KUBELET_SYSCTLS["vm/overcommit_memory"]
        assert host_sysctls() == before
    finally:
        forward.kill()
        forward.wait()
    left = sandbox.destroy()
    assert left == []
    assert server.wait(timeout=10) is not None  # the server inside was stopped by the teardown
    assert leftovers(sandbox.name) == []
    assert not listening(host_port)
    assert host_sysctls() == before


def test_images_carry_their_build_key_and_a_second_build_pushes_nothing(sandbox, tmp_path):
    lock = lockmod.load()
    node = nodemod.RealNode(sandbox, tmp_path / "pki", api_port=1, cache=paths.cache_dir() / "node", lock=lock)
    node.dir.mkdir(parents=True, exist_ok=True)
    node.write_registry_config()
    node.start_registry()
    builder = images.Builder(sandbox.enter_net(), lock)
    first = builder.ensure("pause")
    second = builder.ensure("pause")
    assert second.action == "up to date"
    assert builder.current_key(first.reference) == images.recipe("pause", lock).key
    assert first.reference == f"{nodemod.MIRROR}/trainstack/pause:{lock.kubernetes_version}"
    # the pause binary is upstream's pause.c, static, and the image's entrypoint
    config = json.loads(builder.crane_ok("config", first.reference))["config"]
    assert config["Entrypoint"] == ["/pause"] and config["User"] == "65535:65535"
    # its layers are zstd (containerd unpacks them; every pod sandbox on the real node runs this image)
    layers = json.loads(builder.crane_ok("manifest", first.reference))["layers"]
    assert layers and {layer["mediaType"] for layer in layers} == {imagelayers.ZSTD_MEDIA_TYPE}


def test_e2e_down_cleans_up_after_a_crashed_run():
    need = ("kubelet", "containerd", "registry", "crane", "coredns")
    if not all(tools.find(b) for b in need):
        pytest.fail("the real node's parts are not built: run 'make setup'")
    log = Path(paths.cache_dir()) / "e2e" / f"pytest-crash-{os.getpid()}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as sink:
        proc = subprocess.Popen([str(ROOT / ".venv" / "bin" / "trainstack"), "e2e", "--nodes", "real"], cwd=ROOT,
                                stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while "... helm install" not in log.read_text():
            assert proc.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, "the run never reached helm install"
            time.sleep(0.5)
        # this run's sandboxes (another group's clusters may run meanwhile: make test-e2e)
        names = [p.name for p in sandboxmod.NETNS_DIR.iterdir()
                 if sandboxmod.owner_record(p.name).get("owner_pid") == proc.pid]
        assert names, "a real-node run has a sandbox"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the suite dies without tearing down
        proc.wait()
    # the crashed run's folder, from its sandbox's owner record (workdir: RUN/kwok/n0); others may run meanwhile
    run_dir = str(Path(sandboxmod.owner_record(names[0])["workdir"]).parents[1]) + "/"
    assert processes_mentioning(run_dir), "the crashed run left its cluster running"
    down = run_cli("e2e", "down", timeout=300)
    assert down.returncode == 0, down.stderr
    # (whoever removed the sandboxes: `down`, or another group's cluster starting meanwhile, which also
    # removes what a dead run left)
    assert processes_mentioning(run_dir) == []
    for netns in names:
        assert leftovers(netns.removeprefix(sandboxmod.PREFIX)) == []
    mounts = Path("/proc/self/mountinfo").read_text()
    assert run_dir not in mounts and not any(f"/{netns} " in mounts for netns in names)
    log.unlink()
