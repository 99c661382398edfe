"""A kind cluster on this host: kind's own CLI driving a private Docker engine, with the node image assembled here.

Everything runs inside one `Sandbox` (network and mount namespaces, a cgroup root): the engine (`engine.py`),
the cluster's image mirror (the pinned registry on the kind network's gateway, the same storage the local
provider's mirror uses), and kind's node containers with their containerd, kubelet and pods. kind itself
and the docker client run on the host and speak to the engine over its unix socket. Host-side clients reach
the API server through a port on the host's 127.0.0.1 relayed into the namespace (`forward.py`), where
docker-proxy publishes the control plane's 6443 on the namespace's loopback.

Each worker's containerd root (/var/lib/containerd) is a store of the real nodes' image-store pool (imagestore.py),
kept between clusters: a warm run pulls only what changed, and its teardown deletes no image.

kindnetd cannot be had here, so the cluster is created with kind's default CNI off, and each node gets what
kindnetd would give it: a bridge CNI configuration with the node's pod subnet (its Node's spec.podCIDR) and a
route to every other node's pod subnet through that node's address on the kind network.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .. import images, paths, proc, progress, tools, yamlio
from .. import lock as lockmod
from ..errors import UserError, output_line
from ..kubectl import Kubectl
from . import addons, imagestore, kindnode
from . import engine as enginemod
from .common import free_port
from .node import CLUSTER_POD_CIDR, REGISTRY_PORT, registry_config
from .sandbox import NETNS_DIR, PREFIX, Sandbox, cleanup_stale, log_tail, owner_record

SANDBOX_PREFIX = "kind-"  # the engines' sandboxes, trainstack-kind-<cluster>: `e2e down --provider kind` removes these
API_PORT = 6443  # the control plane's, published on the sandbox's loopback
# The images kubeadm runs the control plane from (kindnode.kubeadm_patches names them), beside the pause image.
CONTROL_PLANE_IMAGES = ("pause", "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
                        "kube-proxy", "coredns")


def leftovers() -> list[Path]:
    """The engines' data roots that runs left (a crash, a kept cluster's): each run's engine keeps its images,
    containers and volumes (the nodes' /var) in its run folder."""
    base = paths.cache_dir() / "e2e"
    return sorted(base.glob("run-*/kind/engine/docker")) if base.is_dir() else []


def remove_leftovers() -> list[str]:
    """Remove the data roots of engines no longer running (after sandbox.cleanup_stale: a sandbox still there is
    a live run's, or a kept cluster's, and its data stays); a line each."""
    alive = {Path(str(owner_record(p.name).get("workdir", ""))) for p in NETNS_DIR.glob(f"{PREFIX}{SANDBOX_PREFIX}*")} \
        if NETNS_DIR.is_dir() else set()
    done = []
    for root in leftovers():
        if root.parent in alive:
            continue
        shutil.rmtree(root, ignore_errors=True)
        done.append(f"removed the kind engine's data {root}")
    return done


def config(base: Path, name: str, lock: lockmod.Lock, volumes: Path | None = None,
           stores: list[Path] | None = None) -> dict[str, Any]:
    """kind's cluster configuration: BASE's nodes (e2e/kind-config.yaml, as users' CI has it) with what this
    host and the assembled node image need: the API server on the sandbox's loopback, no default CNI, the
    mirror's control-plane images, kubelet on cgroup v1."""
    try:
        cfg = yamlio.load(base.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise UserError(f"{base}: cannot read kind's configuration: {err}") from None
    if not isinstance(cfg, dict) or not isinstance(cfg.get("nodes"), list):
        raise UserError(f"{base}: kind configuration needs a `nodes` list")
    cfg["name"] = name
    cfg["networking"] = {**(cfg.get("networking") or {}), "apiServerAddress": "127.0.0.1",
                         "apiServerPort": API_PORT, "disableDefaultCNI": True,
                         "podSubnet": CLUSTER_POD_CIDR}
    cfg["kubeadmConfigPatches"] = [*(cfg.get("kubeadmConfigPatches") or []), *kindnode.kubeadm_patches(lock)]
    if volumes is not None:  # the static PVs' folders, at the same path in every node: data follows a pod
        for node in cfg["nodes"]:
            node["extraMounts"] = [*(node.get("extraMounts") or []),
                                   {"hostPath": str(volumes), "containerPath": str(volumes)}]
    # each worker's containerd root, in the order of STORES: an image store kept between clusters (imagestore)
    for node, store in zip((n for n in cfg["nodes"] if n.get("role") == "worker"), stores or [], strict=False):
        node["extraMounts"] = [*(node.get("extraMounts") or []),
                               {"hostPath": str(store), "containerPath": "/var/lib/containerd"}]
    return cfg


@dataclass
class KindNode:
    """A kind node that runs workloads (a worker): what the e2e's real-node steps read of a node."""

    cluster: KindCluster
    name: str
    ip: str
    pod_subnet: str
    linked = True  # its own eth0 on the kind network

    def link_bytes(self) -> dict[str, int]:
        """Bytes received and sent on the node's eth0 (the kernel's counters, read inside the node)."""
        out = self.cluster.node_exec(self.name, "cat", "/sys/class/net/eth0/statistics/rx_bytes",
                                     "/sys/class/net/eth0/statistics/tx_bytes").stdout.split()
        return {"rx": int(out[0]), "tx": int(out[1])}


class KindCluster:
    """A kind cluster NAME (work files in WORKDIR) with IMAGE_NAMES (builtImages entries) in its mirror."""

    def __init__(self, name: str, workdir: Path, lock: lockmod.Lock, image_names: list[str], base_config: Path,
                 workload_images: tuple[str, ...] = ()) -> None:
        self.name = name
        self.workdir = workdir
        self.lock = lock
        self.image_names = [n for n in images.names(lock) if n in {*image_names, *CONTROL_PLANE_IMAGES}]
        self.workload_images = tuple(workload_images)  # pulled into the workers ahead of the TrainJobs
        self.base_config = base_config
        self.sandbox: Sandbox | None = None
        self.engine: enginemod.Engine | None = None
        self.registry: proc.Popen | None = None
        self.forwarder: proc.Popen | None = None
        self.api_port = 0
        self.built_images: list[images.Built] = []
        self.node_image = ""
        self.timings: dict[str, float] = {}
        self.nodes: list[KindNode] = []  # the workers, once the pod network is up
        self.prepulls: list[proc.Popen] = []
        self.stores: list[imagestore.Claim] = []  # the workers' containerd roots, held for the cluster's life
        self.builder: images.Builder | None = None

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def logs_dir(self) -> Path:
        return self.workdir / "engine" / "logs"

    def _timed(self, what: str, start: float) -> None:
        self.timings[what] = round(time.monotonic() - start, 1)

    def kind(self, *args: str, timeout: float = 900) -> proc.CompletedProcess:
        assert self.engine is not None
        return proc.run([str(tools.require("kind", self.lock)), *args], check=False, timeout=timeout,
                        env=self.engine.env(), stdin=proc.DEVNULL)

    # -- start -------------------------------------------------------------------------------------
    def start(self) -> KindCluster:
        for line in cleanup_stale():
            progress.info(f"  {line} (left by an earlier run)")
        busy = sorted(p.name for p in NETNS_DIR.glob(f"{PREFIX}{SANDBOX_PREFIX}*")) if NETNS_DIR.is_dir() else []
        if busy:  # the engine's data root is one per machine: one kind cluster at a time
            raise UserError(f"a kind cluster of this machine's private engine is running ({', '.join(busy)}: another "
                            "run, or one kept with --keep); nothing was run", "remove it with 'trainstack e2e down'")
        start = time.monotonic()
        box = Sandbox(name=f"{SANDBOX_PREFIX}{self.name.removeprefix('trainstack-')}", workdir=self.workdir / "engine")
        box.holder_setup = enginemod.holder_setup(box.workdir)
        self.sandbox = box.create()
        for line in remove_leftovers():
            progress.info(f"  {line} (left by an earlier run)")
        self.engine = enginemod.Engine(box, self.lock, box.workdir / "docker")
        with progress.step(f"Docker engine in {box.netns}"):
            self.engine.start()
        self._timed("engine", start)
        start = time.monotonic()
        self._start_registry()
        builder = self.builder = images.Builder(box.enter_net(), self.lock)
        self.built_images = builder.ensure_all(self.image_names)
        self._timed("images", start)
        start = time.monotonic()
        self.node_image = kindnode.ensure(self.engine, self.lock)
        self._timed("node image", start)
        start = time.monotonic()
        self._network()
        cfg_path = self.workdir / "kind-config.yaml"
        volumes = self.workdir / "storage"
        self._claim_stores()
        cfg_path.write_text(yaml.safe_dump(config(self.base_config, self.name, self.lock, volumes / "volumes",
                                                  [c.root for c in self.stores]),
                                           sort_keys=False))
        objects = addons.static_volumes(volumes)  # (makes the folders the nodes mount)
        with progress.step(f"kind create cluster {self.name} ({self.node_count()} nodes, image {self.node_image})"):
            result = self.kind("create", "cluster", "--name", self.name, "--config", str(cfg_path),
                               "--image", self.node_image, "--kubeconfig", str(self.workdir / "kubeconfig.inside"),
                               "--retain", timeout=1200)
            (self.workdir / "kind-create.log").write_text(result.stdout + result.stderr)
            if result.returncode != 0:
                raise UserError(f"kind create cluster failed: {output_line(result.stderr)}",
                                f"see {self.workdir / 'kind-create.log'} and the node logs in the run's artifacts")
        self._timed("kind create", start)
        start = time.monotonic()
        self._forward()
        self._pod_network()
        self.wait_nodes_ready(timeout=300)
        self._drop_stale_images()
        self.prepull([b.reference for b in self.built_images if b.name in self.workload_images])
        self.kube.kubectl("delete", "storageclass", "standard", "--ignore-not-found")  # kind's, no provisioner here
        self.kube.apply(objects)
        self._timed("pod network and nodes Ready", start)
        return self

    def node_count(self) -> int:
        return len(config(self.base_config, self.name, self.lock)["nodes"])

    def _start_registry(self) -> None:
        assert self.sandbox is not None
        storage = paths.cache_dir() / "node" / "registry"
        storage.mkdir(parents=True, exist_ok=True)
        cfg = self.sandbox.workdir / "registry.yaml"
        cfg.write_text(yaml.safe_dump(registry_config(storage, f"0.0.0.0:{REGISTRY_PORT}")))
        registry = self.registry = self.sandbox.start(
            "registry", [str(tools.require("registry", self.lock)), "serve", str(cfg)], self.logs_dir / "registry.log",
            env={**os.environ, "OTEL_TRACES_EXPORTER": "none"})
        if not self.sandbox.wait_listening(REGISTRY_PORT, 30, alive=lambda: registry.poll() is None):
            raise UserError(f"the kind cluster's registry did not start: {log_tail(self.logs_dir / 'registry.log')}")

    def _network(self) -> None:
        """kind's network, made before kind does: kind would ask for masquerading, and nothing leaves here."""
        assert self.engine is not None
        self.engine.docker("network", "create", "-d", "bridge", "--subnet", kindnode.SUBNET,
                           "--gateway", kindnode.GATEWAY,
                           "-o", "com.docker.network.bridge.enable_ip_masquerade=false", kindnode.NETWORK)

    def _forward(self) -> None:
        assert self.sandbox is not None
        self.api_port = free_port()
        log = (self.workdir / "forward.log").open("w")
        self.forwarder = proc.start(
            [sys.executable, "-m", "trainstack.cluster.forward", str(self.sandbox.netns_path),
             f"{self.api_port}:{API_PORT}"],
            stdout=proc.PIPE, stderr=log, stdin=proc.DEVNULL, text=True, start_new_session=True)
        line = self.forwarder.stdout.readline() if self.forwarder.stdout else ""
        if line.strip() != "ready":
            raise UserError(f"the port forwarder did not start: {(self.workdir / 'forward.log').read_text()[-300:]}")
        inside = yamlio.load((self.workdir / "kubeconfig.inside").read_text())
        for cluster in inside.get("clusters", []):
            cluster["cluster"]["server"] = f"https://127.0.0.1:{self.api_port}"
        self.kubeconfig.write_text(yaml.safe_dump(inside))
        self.kubeconfig.chmod(0o600)

    def node_names(self) -> list[str]:
        assert self.engine is not None
        out = self.engine.docker("ps", "--filter", f"label=io.x-k8s.kind.cluster={self.name}",
                                 "--format", "{{.Names}}").stdout.split()
        return sorted(out)

    def node_exec(self, node: str, *cmd: str, stdin: str | None = None, timeout: float = 120) -> proc.CompletedProcess:
        assert self.engine is not None
        result = proc.run([str(self.engine.root / "usr/bin/docker"), "exec", "-i", node, *cmd], check=False,
                          env=self.engine.env(), timeout=timeout, input=stdin or "")
        if result.returncode != 0:
            raise UserError(f"{node}: '{' '.join(cmd[:4])}' failed: {(result.stderr or result.stdout).strip()[-300:]}")
        return result

    @property
    def kube(self) -> Kubectl:
        """kubectl against this cluster, through the host's relayed port."""
        return Kubectl(self.kubeconfig, lock=self.lock)

    def _pod_network(self) -> None:
        """What kindnetd does: each node's bridge CNI configuration for its pod subnet, routes to the others'."""
        nodes = self.kube.kubectl_json("get", "nodes").get("items", [])
        subnets: dict[str, tuple[str, str]] = {}
        for node in nodes:
            cidr = node.get("spec", {}).get("podCIDR", "")
            ip = next((a["address"] for a in node.get("status", {}).get("addresses", []) if a["type"] == "InternalIP"), "")
            if not cidr or not ip:
                raise UserError(f"kind node {node['metadata']['name']} has no pod subnet or address yet")
            subnets[node["metadata"]["name"]] = (cidr, ip)
        self.nodes = [KindNode(self, name, ip, cidr) for name, (cidr, ip) in sorted(subnets.items())
                      if not any(t.get("key") == "node-role.kubernetes.io/control-plane"
                                 for t in next(n for n in nodes if n["metadata"]["name"] == name)["spec"].get("taints", []))]
        for name, (cidr, _ip) in subnets.items():
            self.node_exec(name, "sh", "-c", "cat > /etc/cni/net.d/10-trainstack.conflist",
                           stdin=kindnode.cni_config(cidr))
            for peer, (peer_cidr, peer_ip) in subnets.items():
                if peer != name:
                    self.node_exec(name, "ip", "route", "replace", peer_cidr, "via", peer_ip)

    def _claim_stores(self) -> None:
        """A store of the real nodes' pool (imagestore: kept between clusters, the local provider's too) for each
        worker; a worker finding none free starts with an empty containerd root, as a new kind node does."""
        workers = sum(1 for n in config(self.base_config, self.name, self.lock)["nodes"] if n.get("role") == "worker")
        pool = imagestore.pool_dir()
        for store in imagestore.seed(pool):
            progress.info(f"  image store {store} cloned from a populated one (hard links)")
        for _ in range(workers):
            claimed = imagestore.claim(pool)
            if claimed is None:
                break
            self.stores.append(claimed)

    def _drop_stale_images(self) -> None:
        """A kept store's images whose tag the mirror now serves at another digest go, and the worker's system pods
        (kube-proxy) restart on the current ones; TrainJobs' pods pull theirs as they start."""
        assert self.builder is not None
        for node in self.nodes[:len(self.stores)]:
            listing = self.node_exec(node.name, "ctr", "-n", "k8s.io", "images", "ls").stdout
            stale = imagestore.stale_refs(listing, self.builder.digest)
            if stale:
                self.node_exec(node.name, "ctr", "-n", "k8s.io", "images", "rm", *stale)
                self.kube.kubectl("delete", "pods", "-n", "kube-system", "--field-selector", f"spec.nodeName={node.name}",
                             "--wait=false")
                progress.info(f"  {node.name}: {len(stale)} stale image reference(s) removed from its kept store")

    def prepull(self, refs: list[str]) -> None:
        """Start pulling REFS (the mirror's workload images) into every worker's containerd, in the background:
        a new kind node has no image, and the torch image alone is gigabytes, so the pulls run while the chart
        installs rather than when the first TrainJob starts. The kubelet pulls whatever is not there yet itself."""
        assert self.engine is not None
        docker = str(self.engine.root / "usr/bin/docker")
        for node in self.nodes:
            script = " ; ".join(f"ctr -n k8s.io images pull --hosts-dir /etc/containerd/certs.d {ref} >/dev/null"
                                for ref in refs)
            log = (self.logs_dir / f"prepull-{node.name}.log").open("w")
            self.prepulls.append(proc.start([docker, "exec", node.name, "sh", "-c", script], stdout=log,
                                            stderr=proc.STDOUT, stdin=proc.DEVNULL, env=self.engine.env()))

    def wait_nodes_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            result = self.kube.kubectl("get", "nodes", "-o", "json", check=False)
            items = json.loads(result.stdout).get("items", []) if result.returncode == 0 else []
            ready = [n for n in items if any(c["type"] == "Ready" and c["status"] == "True"
                                             for c in n.get("status", {}).get("conditions", []))]
            if items and len(ready) == len(items):
                return
            if time.monotonic() > deadline:
                raise UserError(f"kind nodes not Ready within {timeout:.0f}s: "
                                f"{sorted(n['metadata']['name'] for n in items if n not in ready)}")
            time.sleep(1)

    # -- logs and teardown ---------------------------------------------------------------------------
    def export_logs(self, out: Path) -> dict[str, Path]:
        if self.engine is None:
            return {}
        self.kind("export", "logs", str(out), "--name", self.name, timeout=300)
        found = {p.relative_to(out).with_suffix("").as_posix().replace("/", "_"): p for p in out.rglob("*.log")} \
            if out.is_dir() else {}
        found.update({f"engine-{p.stem}": p for p in self.logs_dir.glob("*.log")})
        return found

    def stop(self) -> list[str]:
        """Stop everything of the cluster (engine, registry, nodes, pods) and remove its sandbox and the engine's
        data; returns what could not be removed."""
        for pull in self.prepulls:
            if pull.poll() is None:
                pull.kill()
                pull.wait()
        if self.forwarder is not None:
            self.forwarder.terminate()
            self.forwarder.wait()
        # no `kind delete cluster`: the cluster lives in the engine, and the engine in the sandbox, whose removal
        # stops every process of it (nodes and pods included, by cgroup); the engine's data root then goes whole
        start = time.monotonic()
        left = self.sandbox.destroy() if self.sandbox is not None else []
        self._timed("teardown: processes, cgroups, namespaces", start)
        start = time.monotonic()
        if not left:  # nothing runs on it any more: the engine's images, containers and volumes go
            for sub in ("docker", "usrlib"):
                shutil.rmtree(self.workdir / "engine" / sub, ignore_errors=True)
        self._timed("teardown: the engine's data", start)
        for store in self.stores:
            store.release()
        return left
