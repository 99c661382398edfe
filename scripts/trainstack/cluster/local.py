"""A real Kubernetes control plane as local processes, with KWOK fake nodes.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler and the KWOK controller are the
pinned binaries from the tool cache, started by the pinned kwokctl (its `binary` runtime) from a
config written here. Nothing is downloaded and nothing needs Docker. Everything listens on
127.0.0.1. Nodes are fake: the scheduler places pods for real (resources, taints, selectors), then
KWOK plays the kubelet with upstream's stages: pods become Running, pods owned by a Job succeed,
and pods labelled `pod-container-running-failed.stage.kwok.x-k8s.io=true` fail. Containers never
run. Pods of Deployments in `host_namespaces` are left Pending for the caller, who runs those
controllers as local processes and marks their pods Ready when they really are.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import yaml

from .. import chartpack, paths, tools
from .. import lock as lockmod
from ..errors import UserError, output_line

# Binaries the control plane needs, all pinned in the lock and built by `trainstack tools install`.
BINARIES = ("kwokctl", "kwok", "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
# Label that makes KWOK fail a Job pod (upstream's chaos stage); pod-complete is narrowed to skip it.
FAIL_LABEL = "pod-container-running-failed.stage.kwok.x-k8s.io"
GPU_RESOURCE = "nvidia.com/gpu"
# Names pods use for the API server (the `kubernetes` Service's first address included).
REAL_NODE_SANS = ("10.96.0.1", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                  "kubernetes.default.svc.cluster.local")
POOL_LABEL = "trainstack.io/pool"
# Upstream stage files (kwok module, kustomize/stage/...) this cluster uses.
STAGE_FILES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
    "pod/chaos/pod-container-running-failed.yaml",
)
# Components in the order kwokctl starts them; with a port base they get base+0.. in this order.
PORT_NAMES = ("etcd", "etcd-peer", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok-controller")


@dataclass(frozen=True)
class NodePool:
    """A group of identical fake nodes."""

    name: str
    count: int = 2
    cpu: str = "32"
    memory: str = "128Gi"
    pods: str = "110"
    extended: dict[str, str] = field(default_factory=dict)  # e.g. {"nvidia.com/gpu": "8"}
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[dict[str, str], ...] = ()

    def node_names(self) -> list[str]:
        return [f"{self.name}-{i}" for i in range(self.count)]

    def nodes(self) -> list[dict[str, Any]]:
        resources = {"cpu": self.cpu, "memory": self.memory, "pods": self.pods, **self.extended}
        out = []
        for name in self.node_names():
            labels = {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                POOL_LABEL: self.name,
                **self.labels,
            }
            out.append(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": name,
                        "labels": labels,
                        "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                    },
                    "spec": {"taints": [dict(t) for t in self.taints]} if self.taints else {},
                    "status": {"allocatable": dict(resources), "capacity": dict(resources)},
                }
            )
        return out


def default_pools(
    gpu_labels: dict[str, str] | None = None, gpu_taints: tuple[dict[str, str], ...] | None = None
) -> list[NodePool]:
    """A CPU pool and a GPU pool carrying `nvidia.com/gpu` capacity and the usual GPU taint."""
    taints = (
        gpu_taints if gpu_taints is not None else ({"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"},)
    )
    labels = gpu_labels if gpu_labels is not None else {"nvidia.com/gpu.present": "true"}
    return [
        NodePool("cpu", count=2),
        NodePool("gpu", count=2, extended={GPU_RESOURCE: "8"}, labels=dict(labels), taints=tuple(taints)),
    ]


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port nobody listens on now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def check_ports_free(named: dict[str, int]) -> None:
    """A UserError naming the first taken port and who wanted it."""
    for name, port in named.items():
        if not port_is_free(port):
            raise UserError(
                f"port 127.0.0.1:{port} ({name}) is already in use",
                "stop what listens there or pick another --port-base",
            )


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not yet reaped) is not running
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def stop_pids(pids: list[int], grace: float = 10.0) -> None:
    """SIGTERM the given processes (ours), then SIGKILL what is still there after `grace` seconds."""
    alive = [p for p in pids if pid_alive(p)]
    for pid in alive:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(pid_alive(p) for p in alive):
        time.sleep(0.1)
    for pid in alive:
        if pid_alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def stage_documents(lock: lockmod.Lock, host_namespaces: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Upstream's KWOK stages from the pinned, checksum-verified kwok module, adapted here.

    pod-complete skips pods labelled for failure (so the chaos stage alone decides them), and
    pod-ready skips Deployment pods in `host_namespaces` (their controllers run as local processes).
    """
    source = lock.source("kwok")
    cache = paths.cache_dir() / "e2e" / "stages" / f"{source.version}-{source.sum.replace('/', '_')}.json"
    if cache.is_file():
        stages = json.loads(cache.read_text())
    else:
        info = tools.module_info(source.module, source.version)
        zip_path = Path(info["Zip"])
        actual = chartpack.module_h1(zip_path)
        if actual != source.sum:
            raise UserError(
                f"checksum mismatch for {source.module}@{source.version}: lock says {source.sum}, "
                f"the module zip hashes to {actual}",
                "do not use this module; check the lock file",
            )
        prefix = f"{source.module}@{source.version}/kustomize/stage/"
        stages = []
        with zipfile.ZipFile(zip_path) as archive:
            for rel in STAGE_FILES:
                stages.append(yaml.safe_load(archive.read(prefix + rel)))
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(stages))
    out = []
    for stage in stages:
        name = stage["metadata"]["name"]
        exprs = stage["spec"]["selector"]["matchExpressions"]
        if name == "pod-complete":
            exprs.append({"key": f'.metadata.labels["{FAIL_LABEL}"]', "operator": "NotIn", "values": ["true"]})
        if name == "pod-ready" and host_namespaces:
            system = copy.deepcopy(stage)
            exprs.append({"key": ".metadata.namespace", "operator": "NotIn", "values": list(host_namespaces)})
            system["metadata"]["name"] = "pod-ready-host-namespaces"
            system["spec"]["selector"]["matchExpressions"] += [
                {"key": ".metadata.namespace", "operator": "In", "values": list(host_namespaces)},
                {"key": ".metadata.ownerReferences.[].kind", "operator": "NotIn", "values": ["ReplicaSet"]},
            ]
            out.append(system)
        out.append(stage)
    return out


class LocalCluster:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler + KWOK, as local processes.

    Use as a context manager, or call start() and stop(). `kubeconfig` is an admin kubeconfig;
    `kubectl(...)` runs the pinned kubectl against the cluster.
    """

    def __init__(
        self,
        name: str | None = None,
        workdir: Path | None = None,
        pools: list[NodePool] | None = None,
        port_base: int | None = None,
        cert_sans: tuple[str, ...] = (),
        host_namespaces: tuple[str, ...] = (),
        lock: lockmod.Lock | None = None,
        real_node: bool = False,
        image_names: list[str] | None = None,
    ) -> None:
        self.lock = lock or lockmod.load()
        self.real_node = real_node
        self.sandbox: Any = None
        self.node: Any = None
        self.forwarder: subprocess.Popen | None = None
        self.registry_port = 0
        self.built_images: list[Any] = []
        self.image_names = image_names  # images the real node needs (default: every builtImages entry)
        self.name = name or f"trainstack-{uuid.uuid4().hex[:8]}"
        self.workdir = Path(workdir) if workdir else paths.cache_dir() / "e2e" / "clusters" / self.name
        self.pools = pools if pools is not None else default_pools()
        self.port_base = port_base
        self.cert_sans = tuple(cert_sans)
        self.host_namespaces = tuple(host_namespaces)
        self.binaries: dict[str, Path] = {}
        self._ports: dict[str, int] = {}
        self.started = False

    # -- paths ------------------------------------------------------------------------------
    @property
    def cluster_dir(self) -> Path:
        return self.workdir / "clusters" / self.name

    @property
    def kubeconfig(self) -> Path:
        return self.cluster_dir / "kubeconfig.yaml"

    @property
    def ca_cert(self) -> Path:
        return self.cluster_dir / "pki" / "ca.crt"

    @property
    def serving_cert(self) -> tuple[Path, Path]:
        """The cluster's certificate and key; its SANs include `cert_sans` (used for webhooks)."""
        return self.cluster_dir / "pki" / "admin.crt", self.cluster_dir / "pki" / "admin.key"

    @property
    def logs_dir(self) -> Path:
        return self.cluster_dir / "logs"

    def ca_bundle(self) -> str:
        return base64.b64encode(self.ca_cert.read_bytes()).decode()

    def server(self) -> str:
        config = yaml.safe_load(self.kubeconfig.read_text())
        return config["clusters"][0]["cluster"]["server"]

    def ports(self) -> dict[str, int]:
        """Component -> port: from port_base up, else free ports the OS picks (random, unlike kwokctl's
        scan down from 32767, so clusters started at the same moment do not pick the same ports)."""
        if self.port_base is not None:
            return {name: self.port_base + i for i, name in enumerate(PORT_NAMES)}
        if not self._ports:
            self._ports = {name: free_port() for name in PORT_NAMES}
        return dict(self._ports)

    def enter(self) -> list[str]:
        """Prefix that runs a command where the cluster lives (nothing for a host-process cluster)."""
        return self.sandbox.enter() if self.sandbox else []

    # -- lifecycle --------------------------------------------------------------------------
    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["KWOK_WORKDIR"] = str(self.workdir)
        env["KUBECONFIG"] = str(self.kubeconfig)
        for key in [k for k in env if k.lower() in ("http_proxy", "https_proxy", "all_proxy")]:
            env.pop(key)
        env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost,.svc"
        return env

    def _config(self) -> list[dict[str, Any]]:
        b = self.binaries
        options: dict[str, Any] = {
            "runtime": "binary",
            "kubeVersion": self.lock.kubernetes_version,
            "bindAddress": "127.0.0.1",
            "kubeApiserverBinary": str(b["kube-apiserver"]),
            "kubeControllerManagerBinary": str(b["kube-controller-manager"]),
            "kubeSchedulerBinary": str(b["kube-scheduler"]),
            "kubectlBinary": str(b["kubectl"]),
            "etcdBinary": str(b["etcd"]),
            "kwokControllerBinary": str(b["kwok"]),
            "cacheDir": str(self.workdir / "cache"),
            "kubeApiserverCertSANs": [*self.cert_sans, *(REAL_NODE_SANS if self.real_node else ())],
            "disableQPSLimits": True,
        }
        ports = self.ports()
        options.update(
            {
                "etcdPort": ports["etcd"],
                "etcdPeerPort": ports["etcd-peer"],
                "kubeApiserverPort": ports["kube-apiserver"],
                "kubeControllerManagerPort": ports["kube-controller-manager"],
                "kubeSchedulerPort": ports["kube-scheduler"],
                "kwokControllerPort": ports["kwok-controller"],
            }
        )
        config: dict[str, Any] = {"apiVersion": "config.kwok.x-k8s.io/v1alpha1", "kind": "KwokctlConfiguration",
                                  "options": options}
        if self.real_node:
            from . import node as nodemod

            # Inside the sandbox: the API server also answers on the node address (pods reach it through
            # the `kubernetes` Service), Services get a CIDR kube-proxy and CoreDNS agree on, and the API
            # server reaches kubelets by InternalIP with a client certificate the kubelet trusts.
            pki = self.cluster_dir / "pki"
            config["componentsPatches"] = [
                {"name": "kube-apiserver", "extraArgs": [
                    {"key": "bind-address", "value": "0.0.0.0", "override": True},
                    {"key": "advertise-address", "value": nodemod.NODE_IP},
                    {"key": "service-cluster-ip-range", "value": nodemod.SERVICE_CIDR},
                    {"key": "kubelet-preferred-address-types", "value": "InternalIP"},
                    {"key": "kubelet-client-certificate", "value": str(pki / "admin.crt")},
                    {"key": "kubelet-client-key", "value": str(pki / "admin.key")},
                ]},
                {"name": "kube-controller-manager", "extraArgs": [
                    {"key": "service-cluster-ip-range", "value": nodemod.SERVICE_CIDR},
                ]},
                # KWOK plays the kubelet only for its fake nodes, never for the real one.
                {"name": "kwok-controller", "extraArgs": [
                    {"key": "manage-all-nodes", "value": "false", "override": True},
                    {"key": "manage-nodes-with-annotation-selector", "value": "kwok.x-k8s.io/node=fake"},
                ]},
            ]
        return [config, *stage_documents(self.lock, self.host_namespaces)]

    def _kwokctl(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
        cmd = [*self.enter(), str(self.binaries["kwokctl"]), "--name", self.name, *args]
        return subprocess.run(
            cmd, capture_output=True, text=True, env=self._env(), timeout=timeout, stdin=subprocess.DEVNULL
        )

    def start(self, timeout: float = 180) -> LocalCluster:
        """Create and start the cluster, then its node pools; raises UserError with the log tail on failure."""
        self.binaries = {name: tools.require(name, self.lock) for name in BINARIES}
        check_ports_free({f"{n} port": p for n, p in self.ports().items()})
        if self.cluster_dir.exists():
            raise UserError(
                f"a local cluster named {self.name} already exists in {self.workdir}",
                "run 'trainstack e2e down' or pick another name",
            )
        self.workdir.mkdir(parents=True, exist_ok=True)
        config_path = self.workdir / "kwokctl.yaml"
        config_path.write_text(yaml.safe_dump_all(self._config(), sort_keys=False))
        self.started = True  # from here on stop() has something to clean up
        if self.real_node:
            self._start_sandbox()
        try:
            result = self._kwokctl(
                "create",
                "cluster",
                "--config",
                str(config_path),
                "--kubeconfig",
                "",
                "--timeout",
                f"{int(timeout)}s",
                timeout=timeout + 30,
            )
        except subprocess.TimeoutExpired:
            raise self.failure(f"kwokctl create cluster did not finish within {timeout:.0f}s") from None
        if result.returncode != 0:
            raise self.failure(f"kwokctl create cluster failed: {output_line(result.stderr or result.stdout, markers=())}")
        self.wait_api(timeout=60)
        if self.real_node:
            self._start_node()
        from . import node as nodemod

        # PersistentVolumeClaims bind for real (the PV controller) to static PVs, on every kind of node
        self.apply(nodemod.static_volumes(self.workdir / "storage"))
        self.create_nodes()
        self.wait_nodes_ready(timeout=60)
        return self

    # -- the real node --------------------------------------------------------------------------
    def _start_sandbox(self) -> None:
        from . import sandbox as sandboxmod

        self.sandbox = sandboxmod.Sandbox(name=self.name.removeprefix("trainstack-"), workdir=self.workdir / "sandbox")
        self.sandbox.create()
        self.registry_port = free_port()
        from . import node as nodemod

        api = self.ports()["kube-apiserver"]
        log = (self.workdir / "forward.log").open("w")
        self.forwarder = subprocess.Popen(
            [sys.executable, "-m", "trainstack.cluster.forward", str(self.sandbox.netns_path), f"{api}:{api}",
             f"{self.registry_port}:{nodemod.REGISTRY_PORT}"],
            stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, text=True, start_new_session=True)
        line = self.forwarder.stdout.readline() if self.forwarder.stdout else ""
        if line.strip() != "ready":
            raise UserError(f"the port forwarder did not start: {(self.workdir / 'forward.log').read_text()[-300:]}")

    def _start_node(self) -> None:
        from .. import images
        from . import node as nodemod

        self.node = nodemod.RealNode(self.sandbox, self.cluster_dir / "pki", self.ports()["kube-apiserver"],
                                     paths.cache_dir() / "node", self.lock)
        self.node.write_config()
        self.node.start_registry()
        builder = images.Builder(self.sandbox.enter_net(), self.lock)
        self.built_images = builder.ensure_all(self.image_names)
        self.node.start()
        self.apply(nodemod.coredns_objects(images.reference("coredns", self.lock)))
        self.wait_real_node(timeout=90)

    def wait_real_node(self, timeout: float) -> None:
        from . import node as nodemod

        kubelet = self.node.procs["kubelet"]
        # an exited kubelet ends the wait at once: the failure names its last words
        if not self.wait_nodes(lambda nodes: nodemod.NODE_NAME in ready_nodes(nodes), timeout,
                               stop=lambda: kubelet.poll() is not None):
            raise UserError(f"the real node did not become Ready: kubelet: {self.node.log_tail('kubelet')}",
                            f"logs: {self.node.logs_dir}")

    def wait_nodes(self, done: Any, timeout: float, stop: Any = lambda: False) -> Any:
        """DONE(nodes by name) once it is truthy, watching the Node objects; None at TIMEOUT or when
        STOP() turns true (a node's kubelet exited)."""
        from .. import kubeapi

        api = kubeapi.for_kube(self)
        for nodes in kubeapi.snapshots(api, kubeapi.core_objects(api, "nodes"), timeout=timeout, tick=1):
            found = done(nodes)
            if found:
                return found
            if stop():
                return None
        return None

    def failure(self, message: str) -> UserError:
        """A UserError carrying the tail of the component log that explains it best."""
        tail = self.log_tail()
        return UserError(
            f"local cluster {self.name}: {message}" + (f"; {tail}" if tail else ""), f"component logs: {self.logs_dir}"
        )

    def log_tail(self, lines: int = 3) -> str:
        for component in ("kube-apiserver", "etcd", "kwok-controller", "kube-controller-manager", "kube-scheduler"):
            log = self.logs_dir / f"{component}.log"
            if log.is_file():
                text = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
                errors = [ln for ln in text if " E" in ln[:12] or "error" in ln.lower() or "fatal" in ln.lower()]
                if errors:
                    return f"{component}.log: " + " | ".join(errors[-lines:])[:600]
        return ""

    def pids(self) -> dict[str, int]:
        """Component -> pid of the processes kwokctl started for this cluster."""
        out = {}
        for pid_file in sorted((self.cluster_dir / "pids").glob("*.pid")):
            try:
                out[pid_file.stem] = int(pid_file.read_text().strip())
            except (OSError, ValueError):
                continue
        return out

    def component_command(self, component: str) -> tuple[list[str], dict[str, str], str]:
        """How a running control-plane process kwokctl started (etcd, kube-apiserver, ...) was started: its
        command line, environment and working folder (to start it again after a fault)."""
        pid_file = self.cluster_dir / "pids" / f"{component}.pid"
        if not pid_file.is_file():
            raise UserError(f"{self.name}: no running {component} (no {pid_file})")
        proc = Path(f"/proc/{int(pid_file.read_text().strip())}")
        try:
            cmd = [a.decode() for a in (proc / "cmdline").read_bytes().split(b"\0") if a]
            env = dict(ln.decode().split("=", 1) for ln in (proc / "environ").read_bytes().split(b"\0") if b"=" in ln)
            cwd = os.readlink(proc / "cwd")
        except OSError:
            raise UserError(f"{self.name}: {component} is not running") from None
        return cmd, env, cwd

    def start_component(self, component: str, started: tuple[list[str], dict[str, str], str]) -> int:
        """Start a control-plane process again as `component_command` recorded it; its pid file follows."""
        cmd, env, cwd = started
        log = self.cluster_dir / "logs" / f"{component}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a") as sink:
            sink.write(f"\n# started again by trainstack at {time.strftime('%H:%M:%S')}\n")
            sink.flush()
            new = subprocess.Popen([*self.enter(), *cmd], stdout=sink, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, env=env, cwd=cwd, start_new_session=True)
        (self.cluster_dir / "pids" / f"{component}.pid").write_text(f"{new.pid}\n")
        return new.pid

    def component_alive(self, component: str) -> bool:
        pid = self.pids().get(component)
        return bool(pid) and pid_alive(pid)

    def restart_component(self, component: str, kill: bool = False, timeout: float = 60) -> float:
        """Stop one control-plane process (SIGTERM, or SIGKILL with kill) and start it again with the same
        command line, environment and working folder (a fault test: what a systemd or static-pod restart
        does). Returns the seconds until the API answers /readyz again."""
        started = self.component_command(component)
        pid = self.pids()[component]
        start = time.monotonic()
        if kill:
            os.kill(pid, signal.SIGKILL)
        stop_pids([pid], grace=0 if kill else 10.0)
        while pid_alive(pid):
            time.sleep(0.05)
        self.start_component(component, started)
        self.wait_api(timeout)
        return time.monotonic() - start

    def stop(self, remove: bool = True) -> None:
        """Stop every component (kwokctl delete cluster, then any survivor by pid) and remove the workdir."""
        if not self.started and not self.cluster_dir.exists():
            return
        pids = list(self.pids().values())
        if self.node:
            self.node.stop()
        if self.sandbox:
            # Everything kwokctl started lives in the sandbox: its teardown stops all of it at once.
            pass
        elif self.binaries.get("kwokctl") or tools.find("kwokctl", self.lock):
            self.binaries.setdefault("kwokctl", tools.find("kwokctl", self.lock))  # type: ignore[arg-type]
            try:
                # kwokctl removes its context from this file; never the user's kubeconfig
                self._kwokctl(
                    "delete", "cluster", "--kubeconfig", str(self.workdir / "kwokctl-contexts.yaml"), timeout=120
                )
            except subprocess.TimeoutExpired:
                pass
        self.left_behind: list[str] = []
        if self.sandbox:
            self.left_behind = self.sandbox.destroy()
        stop_pids(pids)
        if self.forwarder:
            stop_pids([self.forwarder.pid])
            self.forwarder.wait()
        self.started = False
        if remove:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- API access -------------------------------------------------------------------------
    def kubectl(
        self, *args: str, input_text: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess:
        """Run the pinned kubectl as cluster admin; a failure (with check) is a UserError with kubectl's message."""
        kubectl = self.binaries.get("kubectl") or tools.require("kubectl", self.lock)
        cmd = [
            str(kubectl),
            "--kubeconfig",
            str(self.kubeconfig),
            "--cache-dir",
            str(self.workdir / "kube-cache"),
            *args,
        ]
        result = subprocess.run(cmd, capture_output=True, text=True, input=input_text, timeout=timeout, env=self._env())
        if check and result.returncode != 0:
            raise UserError(f"kubectl {' '.join(args[:3])} failed: {output_line(result.stderr or result.stdout, markers=())}")
        return result

    def kubectl_json(self, *args: str) -> dict[str, Any]:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def apply(self, objects: list[dict[str, Any]], server_side: bool = False) -> None:
        text = yaml.safe_dump_all(objects, sort_keys=False)
        # the cluster is ours: trainstack's apply wins over an earlier test's or tool's field manager
        extra = ["--server-side", "--field-manager=trainstack", "--force-conflicts"] if server_side else []
        self.kubectl("apply", *extra, "-f", "-", input_text=text)

    def wait_api(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            result = self.kubectl("get", "--raw", "/readyz", check=False, timeout=10)
            if result.returncode == 0 and result.stdout.strip() == "ok":
                return
            last = output_line(result.stderr or result.stdout, markers=())
            time.sleep(0.3)
        raise self.failure(f"kube-apiserver not ready within {timeout:.0f}s ({last})")

    def create_nodes(self) -> None:
        nodes = [node for pool in self.pools for node in pool.nodes()]
        if nodes:
            self.kubectl("create", "-f", "-", input_text=yaml.safe_dump_all(nodes, sort_keys=False))

    def wait_nodes_ready(self, timeout: float = 60) -> None:
        wanted = {n for pool in self.pools for n in pool.node_names()}
        seen: dict[str, dict[str, Any]] = {}

        def all_ready(nodes: dict[str, dict[str, Any]]) -> bool:
            seen.clear()
            seen.update(nodes)
            return wanted <= ready_nodes(nodes)

        if not self.wait_nodes(all_ready, timeout):
            missing = ", ".join(sorted(wanted - ready_nodes(seen)))
            raise self.failure(f"nodes not Ready within {timeout:.0f}s: {missing}")


def ready_nodes(nodes: dict[str, dict[str, Any]]) -> set[str]:
    """The names of the NODES (by name) whose Ready condition is True."""
    return {name for name, node in nodes.items()
            if any(c.get("type") == "Ready" and c.get("status") == "True"
                   for c in (node.get("status") or {}).get("conditions") or [])}
