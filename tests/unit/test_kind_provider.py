"""The kind provider's parts that need no engine: which node image it chooses, kind's configuration, the
capability clamp in front of the engine's runc, and the sysctl shield of the assembled node image."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from trainstack import images, yamlio
from trainstack import lock as lockmod
from trainstack.cluster import engine, kind, kindnode, runcclamp
from trainstack.cluster.sandbox import KUBELET_SYSCTLS
from trainstack.e2e.providers import kind as provider

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def lock() -> lockmod.Lock:
    return lockmod.load()


# -- which node image ---------------------------------------------------------------------------------
def test_the_published_node_image_where_an_engine_answers_and_can_pull_it(lock):
    chosen = provider.decide(lock, (True, ""), (True, "pulled"), (True, "root"))
    assert chosen.mode == provider.PUBLISHED
    assert chosen.node_image == lock.kind_node_image().reference()
    assert "@sha256:" in chosen.node_image  # pinned by digest, never by tag alone


def test_the_assembled_node_image_where_no_engine_answers(lock):
    chosen = provider.decide(lock, (False, "no docker command"), None, (True, "root"))
    assert chosen.mode == provider.ASSEMBLED
    assert lock.kubernetes_version in chosen.node_image
    assert "no Docker engine (no docker command)" in chosen.why


def test_the_assembled_node_image_where_the_published_one_cannot_be_pulled(lock):
    chosen = provider.decide(lock, (True, ""), (False, "no route to the registry"), (True, "root"))
    assert chosen.mode == provider.ASSEMBLED
    assert "no route to the registry" in chosen.why


def test_neither_path_says_why_in_one_line(lock):
    chosen = provider.decide(lock, (False, "no docker command"), None, (False, "not root"))
    assert chosen.mode == ""
    assert "not root" in chosen.why and "\n" not in chosen.why


def test_auto_never_picks_the_assembled_path(lock, monkeypatch):
    monkeypatch.setattr(provider, "docker_answers", lambda: (False, "no docker command"))
    monkeypatch.setattr(provider, "can_assemble", lambda: (True, "root"))
    ok, why = provider.viable(lock)
    assert not ok and "no Docker engine" in why


# -- kind's configuration -----------------------------------------------------------------------------
def test_kind_config_keeps_the_users_nodes_and_adds_what_this_host_needs(lock, tmp_path):
    base = ROOT / provider.CONFIG
    cfg = kind.config(base, "c1", lock, volumes=tmp_path / "volumes")
    users = yamlio.load(base.read_text())
    assert [n["role"] for n in cfg["nodes"]] == [n["role"] for n in users["nodes"]] == \
        ["control-plane", "worker", "worker"]
    assert cfg["networking"] == {"apiServerAddress": "127.0.0.1", "apiServerPort": kind.API_PORT,
                                 "disableDefaultCNI": True, "podSubnet": "10.244.0.0/16"}
    patches = [yamlio.load(p) for p in cfg["kubeadmConfigPatches"]]
    kubelet = next(p for p in patches if p["kind"] == "KubeletConfiguration")
    assert kubelet["failCgroupV1"] is False
    for node in cfg["nodes"]:
        assert {"hostPath": str(tmp_path / "volumes"), "containerPath": str(tmp_path / "volumes")} in node["extraMounts"]


def test_kubeadm_asks_the_mirror_for_exactly_the_images_built_for_it(lock):
    """kubeadm names images <imageRepository>/<component>:<version>: each must be a builtImages reference."""
    patch = yamlio.load(kindnode.kubeadm_patches(lock)[0])
    version = lock.kubernetes_version
    wanted = [f"{patch['imageRepository']}/{c}:{version}" for c in
              ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy")]
    etcd = patch["etcd"]["local"]
    wanted += [f"{etcd['imageRepository']}/etcd:{etcd['imageTag']}",
               f"{patch['dns']['imageRepository']}/coredns:{patch['dns']['imageTag']}"]
    built = {images.reference(name, lock) for name in kind.CONTROL_PLANE_IMAGES}
    assert set(wanted) <= built


def test_the_engine_pins_every_package_it_unpacks(lock):
    pinned = engine.versions(lock)
    assert set(pinned) == set(engine.PACKAGES)
    assert pinned["runc"] == lock.get("debian", "runc")  # one runc version for the real node and the engine


def test_an_incomplete_engine_pin_is_one_line(lock, monkeypatch):
    data = dict(lock.data)
    data["dockerEngine"] = {"docker.io": "1"}
    with pytest.raises(Exception, match="dockerEngine must pin exactly"):
        engine.versions(lockmod.Lock(path=lock.path, data=data))


# -- the capability clamp -----------------------------------------------------------------------------
STATUS = "Name:\tx\nCapBnd:\t000001fffeffffff\n"  # every capability but CAP_SYS_RESOURCE (bit 24)


def test_bounding_set_from_status():
    allowed = runcclamp.bounding(STATUS)
    assert "CAP_SYS_RESOURCE" not in allowed
    assert {"CAP_SYS_ADMIN", "CAP_NET_ADMIN", "CAP_CHECKPOINT_RESTORE"} <= allowed
    assert len(allowed) == len(runcclamp.NAMES) - 1


def test_clamp_drops_what_the_host_lacks_from_every_set():
    caps = {s: ["CAP_SYS_ADMIN", "CAP_SYS_RESOURCE"] for s in ("bounding", "effective", "permitted")}
    assert runcclamp.clamp(caps, runcclamp.bounding(STATUS)) == ["CAP_SYS_RESOURCE"]
    assert all(v == ["CAP_SYS_ADMIN"] for v in caps.values())


@pytest.mark.parametrize("args, expected", [
    (["--root", "/r", "create", "--bundle", "/b", "id"], ("/b/config.json", False)),
    (["create", "--bundle=/b", "id"], ("/b/config.json", False)),
    (["create", "-b", "/b", "id"], ("/b/config.json", False)),
    (["exec", "--process", "/p.json", "--detach", "id"], ("/p.json", True)),
    (["exec", "-p", "/p.json", "id"], ("/p.json", True)),
    (["delete", "id"], None),
])
def test_which_spec_runc_will_read(args, expected):
    assert runcclamp.spec_file(args) == expected


def test_the_wrapper_edits_the_bundle_and_execs_runc_with_the_same_arguments(tmp_path):
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    every = [f"CAP_{n}" for n in runcclamp.NAMES]
    (bundle / "config.json").write_text(json.dumps({"process": {"capabilities": {"bounding": every,
                                                                                 "effective": every}}}))
    fake = tmp_path / "runc"
    fake.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path / 'args'}\n")
    fake.chmod(0o755)
    subprocess.run([sys.executable, "-I", runcclamp.__file__, str(fake), "--root", "/r", "create", "--bundle",
                    str(bundle), "c1"], check=True)
    assert (tmp_path / "args").read_text().split() == ["--root", "/r", "create", "--bundle", str(bundle), "c1"]
    caps = json.loads((bundle / "config.json").read_text())["process"]["capabilities"]
    allowed = runcclamp.bounding(Path("/proc/self/status").read_text())
    assert set(caps["bounding"]) == allowed == set(caps["effective"])


# -- the sysctl shield --------------------------------------------------------------------------------
def test_the_shield_covers_kubelets_and_systemds_global_sysctls():
    script = kindnode.shield_script()
    for path, value in KUBELET_SYSCTLS.items():
        assert f"shield {path} {value}\n" in script
    for path in kindnode.HOST_SYSCTLS:
        assert f"shield {path}\n" in script
    assert script.rstrip().endswith('exec "$@"')


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare")
def test_the_shield_hides_the_hosts_sysctls_from_a_node(tmp_path):
    """Run the shield in a private mount namespace: inside, kubelet's values are in place and a write lands
    in the shield's file; the host's values are untouched."""
    shield = tmp_path / "shield"
    shield.write_text(kindnode.shield_script())
    shield.chmod(0o755)
    before = {p: Path("/proc/sys", p).read_text() for p in ("vm/overcommit_memory", "fs/file-max")}
    inside = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", str(shield), "sh", "-c",
         "cat /proc/sys/vm/overcommit_memory; echo 4242 > /proc/sys/fs/file-max; cat /proc/sys/fs/file-max"],
        env={**os.environ, "TRAINSTACK_SHIELD_DIR": str(tmp_path / "files")}, capture_output=True, text=True,
        check=True).stdout.split()
    assert inside == [KUBELET_SYSCTLS["vm/overcommit_memory"], "4242"]
    assert {p: Path("/proc/sys", p).read_text() for p in before} == before


# -- kubectl within the skew policy (a CI runner's own kubectl) ---------------------------------------
@pytest.mark.parametrize("minor, accepted", [(0, True), (1, True), (-1, True), (2, False), (-2, False)])
def test_a_kubectl_on_path_is_used_within_one_minor(lock, tmp_path, monkeypatch, minor, accepted):
    from trainstack import tools

    wanted = int(lock.kubernetes_version.split(".")[1]) + minor
    fake = tmp_path / "kubectl"
    fake.write_text(f"#!/bin/sh\necho '{{\"clientVersion\": {{\"major\": \"1\", \"minor\": \"{wanted}+\"}}}}'\n")
    fake.chmod(0o755)
    monkeypatch.setattr(tools, "find", lambda binary, lock=None: None)  # no pinned kubectl built
    monkeypatch.setenv("PATH", str(tmp_path))
    assert (tools.find_kubectl(lock) == fake) is accepted


def test_kubectl_minor_reads_only_kubectls_json():
    from trainstack import tools

    assert tools.kubectl_minor('{"clientVersion": {"minor": "36"}}') == 36
    assert tools.kubectl_minor("Client Version: v1.36.3") is None


# -- what a crashed run's engine leaves -----------------------------------------------------------------
def test_leftover_engine_data_goes_unless_its_sandbox_is_still_there(tmp_path, monkeypatch):
    from trainstack.cluster import sandbox as sandboxmod

    monkeypatch.setenv("TRAINSTACK_CACHE", str(tmp_path / "cache"))
    netns, owners = tmp_path / "netns", tmp_path / "owners"
    netns.mkdir()
    owners.mkdir()
    monkeypatch.setattr(kind, "NETNS_DIR", netns)
    monkeypatch.setattr(sandboxmod, "OWNERS_DIR", owners)
    roots = {}
    for run in ("run-crashed", "run-alive"):
        roots[run] = tmp_path / "cache" / "e2e" / run / "kind" / "engine" / "docker"
        (roots[run] / "volumes").mkdir(parents=True)
    # the live run's sandbox: its namespace and owner record (the engine's work folder)
    (netns / "trainstack-kind-e2e").write_text("")
    (owners / "trainstack-kind-e2e.json").write_text(json.dumps({"owner_pid": os.getpid(),
                                                                 "workdir": str(roots["run-alive"].parent)}))
    assert kind.remove_leftovers() == [f"removed the kind engine's data {roots['run-crashed']}"]
    assert not roots["run-crashed"].exists() and (roots["run-alive"] / "volumes").is_dir()


def test_each_worker_gets_its_kept_image_store_as_containerd_root(lock, tmp_path):
    stores = [tmp_path / "stores" / "0" / "root", tmp_path / "stores" / "1" / "root"]
    cfg = kind.config(ROOT / provider.CONFIG, "c1", lock, stores=stores)
    roots = [[m["hostPath"] for m in n.get("extraMounts", []) if m["containerPath"] == "/var/lib/containerd"]
             for n in cfg["nodes"]]
    assert roots == [[], [str(stores[0])], [str(stores[1])]]  # the control plane pulls its few small images
    # a store short: the second worker starts with an empty containerd root, as a new kind node does
    cfg = kind.config(ROOT / provider.CONFIG, "c1", lock, stores=stores[:1])
    assert [len(n.get("extraMounts", [])) for n in cfg["nodes"]] == [0, 1, 0]
