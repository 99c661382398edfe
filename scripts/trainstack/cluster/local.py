"""A real Kubernetes control plane as local processes, with KWOK fake nodes.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler and the KWOK controller are the
pinned binaries from the tool cache, started by the pinned kwokctl (its `binary` runtime) from a
config written here (`controlplane.py`). Nothing is downloaded and nothing needs Docker. Everything
listens on 127.0.0.1. Nodes are fake (`kwok.py`): the scheduler places pods for real (resources,
taints, selectors), then KWOK plays the kubelet with upstream's stages: pods become Running, pods
owned by a Job succeed, and pods labelled `pod-container-running-failed.stage.kwok.x-k8s.io=true`
fail. Containers never run. Pods of Deployments in `host_namespaces` are left Pending for the
caller, who runs those controllers as local processes and marks their pods Ready when they really
are. With `real_node`, a sandbox (`sandbox.py`) holds the whole cluster and `real_nodes` real nodes
(`node.py`) run its pods: real-0 in the cluster's namespaces, the others each in their own, linked.

The names other modules import from here (the pools, the port and pid helpers, the constants)
live in `kwok`, `common` and `controlplane`, and stay importable from this module.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Self

import yaml

from .. import images, kubeapi, paths, proc, progress, tools, yamlio
from .. import lock as lockmod
from ..errors import UserError, output_line
from ..kubectl import Kubectl
from . import addons, imagestore, netpol
from . import node as nodemod
from . import sandbox as sandboxmod
from .common import check_ports_free, daemon_env, free_port, pid_alive, port_is_free, stop_pids
from .controlplane import BINARIES, PORT_NAMES, REAL_NODE_SANS, kwokctl_config, write_scheduler_config
from .kwok import (
    FAIL_LABEL,
    GPU_RESOURCE,
    POOL_LABEL,
    STAGE_FILES,
    NodePool,
    default_pools,
    ready_nodes,
    stage_documents,
)

__all__ = [
    "BINARIES", "FAIL_LABEL", "GPU_RESOURCE", "POOL_LABEL", "PORT_NAMES", "REAL_NODE_SANS", "STAGE_FILES",
    "LocalCluster", "NodePool", "check_ports_free", "default_pools", "free_port", "pid_alive", "port_is_free",
    "ready_nodes", "stage_documents", "stop_pids",
]


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
        real_nodes: int = 1,
    ) -> None:
        self.lock = lock or lockmod.load()
        self.real_node = real_node
        self.real_nodes = real_nodes if real_node else 0  # how many real nodes (real-0, real-1, ...)
        self.sandbox: Any = None
        self.node: Any = None  # real-0
        self.nodes: list[Any] = []  # every real node, real-0 first
        self.forwarder: proc.Popen | None = None
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
        config = yamlio.load(self.kubeconfig.read_text())
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
        """kwokctl's environment, which the control plane's processes it starts inherit (GOGC included)."""
        env = daemon_env()
        env["KWOK_WORKDIR"] = str(self.workdir)
        env["KUBECONFIG"] = str(self.kubeconfig)
        for key in [k for k in env if k.lower() in ("http_proxy", "https_proxy", "all_proxy")]:
            env.pop(key)
        env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost,.svc"
        return env

    def _config(self) -> list[dict[str, Any]]:
        return kwokctl_config(self.lock, self.binaries, self.workdir, self.ports(), self.cert_sans, self.real_node,
                              self.cluster_dir / "pki", self.host_namespaces)

    def _kwokctl(self, *args: str, timeout: float = 180) -> proc.CompletedProcess:
        cmd = [*self.enter(), str(self.binaries["kwokctl"]), "--name", self.name, *args]
        return proc.run(cmd, check=False, env=self._env(), timeout=timeout, stdin=proc.DEVNULL)

    def start(self, timeout: float = 180) -> Self:
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
        write_scheduler_config(self.workdir)
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
        except proc.CommandError as err:  # ran past its timeout (or could not start at all)
            timed_out = err.exit_code_of_command is None and "timed out" in err.message
            raise self.failure(f"kwokctl create cluster did not finish within {timeout:.0f}s" if timed_out
                               else err.message) from None
        if result.returncode != 0:
            raise self.failure(f"kwokctl create cluster failed: {output_line(result.stderr or result.stdout, markers=())}")
        self.wait_api(timeout=60)
        if self.real_node:
            self._start_node()
        # PersistentVolumeClaims bind for real (the PV controller) to static PVs, on every kind of node
        self.apply(addons.static_volumes(self.workdir / "storage"))
        self.create_nodes()
        self.wait_nodes_ready(timeout=60)
        return self

    # -- the real node --------------------------------------------------------------------------
    def _start_sandbox(self) -> None:
        self.sandbox = sandboxmod.Sandbox(name=self.name.removeprefix("trainstack-"), workdir=self.workdir / "n0")
        self.sandbox.create()
        self.registry_port = free_port()
        api = self.ports()["kube-apiserver"]
        log = (self.workdir / "forward.log").open("w")
        self.forwarder = proc.start(
            [sys.executable, "-m", "trainstack.cluster.forward", str(self.sandbox.netns_path), f"{api}:{api}",
             f"{self.registry_port}:{nodemod.REGISTRY_PORT}"],
            stdout=proc.PIPE, stderr=log, stdin=proc.DEVNULL, text=True, start_new_session=True)
        line = self.forwarder.stdout.readline() if self.forwarder.stdout else ""
        if line.strip() != "ready":
            raise UserError(f"the port forwarder did not start: {(self.workdir / 'forward.log').read_text()[-300:]}")

    def _start_node(self) -> None:
        pki, api, cache = self.cluster_dir / "pki", self.ports()["kube-apiserver"], paths.cache_dir() / "node"
        stores = imagestore.pool_dir()  # containerd roots kept between clusters
        for store in imagestore.seed(stores):
            progress.info(f"  image store {store} cloned from a populated one (hard links)")
        self.node = nodemod.RealNode(self.sandbox, pki, api, cache, self.lock, store_pool=stores)
        self.nodes = [self.node]
        for index in range(1, self.real_nodes):
            box = sandboxmod.Sandbox(name=f"{self.sandbox.name}-n{index}", workdir=self.workdir / f"n{index}",
                                     parent=self.sandbox, index=index)
            box.create()
            self.nodes.append(nodemod.RealNode(box, pki, api, cache, self.lock, index=index, store_pool=stores))
        for real in self.nodes:
            real.sandbox.add_routes(nodemod.pod_routes(real.index, len(self.nodes)))
            real.write_config()
        self.apply(netpol.rbac_objects())  # before kube-router starts on the nodes
        self.node.start_registry()
        builder = images.Builder(self.sandbox.enter_net(), self.lock)
        self.built_images = builder.ensure_all(self.image_names)
        if any(b.action == "built" for b in self.built_images):
            with progress.step("registry: deleting the blobs of replaced images"):
                self.node.collect_registry_garbage()
        for real in self.nodes:
            real.start(registry_digest=builder.digest)
        self.apply(addons.coredns_objects(images.reference("coredns", self.lock)))
        self.wait_real_node(timeout=90)
        for real in self.nodes:  # NetworkPolicy: kube-router reads its Node at start
            real.start_netpol()
        for real in self.nodes:
            real.wait_netpol()

    def wait_real_node(self, timeout: float) -> None:
        """Every real node Ready; then each Node's spec.podCIDR records the subnet its pods get (set once)."""
        names = {real.name: real for real in self.nodes}

        def down() -> bool:  # an exited kubelet ends the wait at once: the failure names its last words
            return any(real.procs["kubelet"].poll() is not None for real in self.nodes)

        if not self.wait_nodes(lambda nodes: set(names) <= ready_nodes(nodes), timeout, stop=down):
            ready = ready_nodes({n["metadata"]["name"]: n for n in self.kubectl_json("get", "nodes")["items"]})
            late = [real for name, real in names.items() if name not in ready] or self.nodes
            raise UserError("real node " + "; ".join(f"{r.name} did not become Ready: kubelet: {r.log_tail('kubelet')}"
                                                     for r in late), f"logs: {late[0].logs_dir}")
        for real in self.nodes:
            current = self.kubectl_json("get", "node", real.name).get("spec", {}).get("podCIDR")
            if not current:
                self.kubectl("patch", "node", real.name, "--type=merge",
                             "-p", json.dumps({"spec": {"podCIDR": real.pod_subnet, "podCIDRs": [real.pod_subnet]}}))

    def wait_nodes(self, done: Any, timeout: float, stop: Any = lambda: False) -> Any:
        """DONE(nodes by name) once it is truthy, watching the Node objects; None at TIMEOUT or when
        STOP() turns true (a node's kubelet exited)."""
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
        procdir = Path(f"/proc/{int(pid_file.read_text().strip())}")
        try:
            cmd = [a.decode() for a in (procdir / "cmdline").read_bytes().split(b"\0") if a]
            env = dict(ln.decode().split("=", 1) for ln in (procdir / "environ").read_bytes().split(b"\0") if b"=" in ln)
            cwd = os.readlink(procdir / "cwd")
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
            new = proc.start([*self.enter(), *cmd], stdout=sink, stderr=proc.STDOUT,
                             stdin=proc.DEVNULL, env=env, cwd=cwd, start_new_session=True)
        (self.cluster_dir / "pids" / f"{component}.pid").write_text(f"{new.pid}\n")
        return new.pid

    def component_alive(self, component: str) -> bool:
        pid = self.pids().get(component)
        return pid_alive(pid) if pid else False

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
        for real in reversed(self.nodes or ([self.node] if self.node else [])):
            real.stop()
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
            except proc.CommandError:  # ran past its timeout: what survives is stopped by pid below
                pass
        self.left_behind: list[str] = []
        for real in reversed(self.nodes[1:]):  # the further nodes' namespaces first, then the cluster's
            self.left_behind += real.sandbox.destroy()
        if self.sandbox:
            self.left_behind += self.sandbox.destroy()
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
    def kubectl_client(self) -> Kubectl:
        """A kubectl within the skew (the cluster's own where it placed one) as cluster admin, in kwokctl's environment."""
        binary = self.binaries.get("kubectl") or tools.require_kubectl(self.lock)
        return Kubectl(self.kubeconfig, lock=self.lock, binary=binary, cache_dir=self.workdir / "kube-cache",
                       env=self._env())

    def kubectl(
        self, *args: str, input_text: str | None = None, check: bool = True, timeout: float = 60
    ) -> proc.CompletedProcess:
        """Run the pinned kubectl as cluster admin; a failure (with check) is a UserError with kubectl's message."""
        return self.kubectl_client().kubectl(*args, input_text=input_text, check=check, timeout=timeout)

    def kubectl_json(self, *args: str) -> dict[str, Any]:
        return self.kubectl_client().kubectl_json(*args)

    def apply(self, objects: list[dict[str, Any]], server_side: bool = False) -> None:
        # the cluster is ours: trainstack's apply wins over an earlier test's or tool's field manager
        self.kubectl_client().apply(objects, server_side=server_side, force_conflicts=True)

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
