"""Real nodes for the local cluster: containerd, kubelet and kube-proxy, each node in its own sandbox.

All pinned: kubelet and kube-proxy from the control plane's k8s.io/kubernetes version, containerd
2.x from its module, runc and the CNI plugins from the pinned Debian packages (`prereqs.py`).
real-0 lives in the cluster's own namespaces; real-1.. each have a network and mount namespace of
their own, linked to the cluster's bridge (`sandbox.py`). Each node's pods get addresses on a bridge
inside its namespace, from its own /24 of 10.244.0.0/16; the provider writes a route per other
node's subnet into every node's namespace (what kindnet's route controller does on a real cluster),
so pods reach each other by pod IP with no NAT. kube-proxy on each node programs the Service rules
there (iptables mode). The registry (the cluster's image mirror) runs in real-0's namespace;
every containerd pulls from it over plain HTTP, as a mirrored cluster does. PersistentVolumeClaims bind to static hostPath PVs the provider creates
(`addons.static_volumes`): the PV controller in kube-controller-manager binds them for real, with no
provisioner binary to build, and their directories live in the run's work dir, so a claim's
data outlives its pods but not the cluster.

Settings this host kind needs (docs/local-cluster.md): `failCgroupV1: false` and the cgroupfs driver
(cgroup v1), containerd `restrict_oom_score_adj = true` (root lacks CAP_SYS_RESOURCE).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .. import images, paths, proc, tools
from .. import lock as lockmod
from ..errors import UserError
from . import imagestore, netpol
from . import sandbox as sandboxmod
from .sandbox import NODE_IP, Sandbox, node_ip

# the unix sockets containerd and the kubelet bind below a node's directory, and Linux's limit on
# their path (sun_path is 108 bytes with its terminating NUL)
SOCKETS = ("containerd/containerd.sock.ttrpc", "kubelet/device-plugins/kubelet.sock",
           "kubelet/pod-resources/kubelet.sock")
MAX_SOCKET_PATH = 107

NODE_NAME = "real-0"  # the first real node (in the cluster's own namespace)
# Every real node's pods get a /24 of this range: real-i has 10.244.i.0/24 (its Node's spec.podCIDR).
CLUSTER_POD_CIDR = "10.244.0.0/16"
SERVICE_CIDR = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"
DNS_IP = "10.96.0.10"
CLUSTER_DOMAIN = "cluster.local"
REGISTRY_PORT = 5000
MIRROR = f"localhost:{REGISTRY_PORT}"
RUNC = "/usr/sbin/runc"
CNI_BIN = "/usr/lib/cni"
BINARIES = ("kubelet", "kube-proxy", "kube-router", "containerd", "containerd-shim-runc-v2", "ctr", "registry")


# The kubelet settings of every node that runs the platform (the real nodes, the kind provider's): images pulled
# side by side, and pods that see updated Secrets sooner (the controllers wait for the certificates they write
# into their webhook Secrets, and report ready only once the kubelet has put them in the pod): a pod sync every
# 3 s (plus up to half of it as jitter) instead of every minute.
KUBELET_TUNING = {"serializeImagePulls": False, "syncFrequency": "3s"}


def node_name(index: int) -> str:
    return f"real-{index}"


def pod_subnet(index: int) -> str:
    return f"10.244.{index}.0/24"


def pod_routes(index: int, count: int) -> dict[str, str]:
    """Routes the namespace of real node INDEX needs: every other node's pod subnet via that node's address."""
    return {pod_subnet(j): node_ip(j) for j in range(count) if j != index}


def _run(cmd: list[str], cwd: Path | None = None) -> None:
    result = proc.run(cmd, check=False, cwd=cwd, stdin=proc.DEVNULL)
    if result.returncode != 0:
        raise UserError(f"'{' '.join(cmd[:3])}' failed: {(result.stderr or result.stdout).strip()[-300:]}")


def sign_cert(pki: Path, name: str, subject: str, ips: tuple[str, ...] = ()) -> tuple[Path, Path]:
    """A client (and serving) certificate signed by the cluster's CA, with openssl."""
    key, csr, crt, ext = (pki / f"{name}.{s}" for s in ("key", "csr", "crt", "ext"))
    if crt.is_file() and key.is_file():
        return crt, key
    san = ",".join(f"IP:{ip}" for ip in ips)
    ext.write_text("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
                   "extendedKeyUsage=clientAuth,serverAuth\n" + (f"subjectAltName={san}\n" if san else ""))
    _run(["openssl", "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
          "-subj", subject])
    _run(["openssl", "x509", "-req", "-in", str(csr), "-CA", str(pki / "ca.crt"), "-CAkey", str(pki / "ca.key"),
          "-CAcreateserial", "-out", str(crt), "-days", "2", "-extfile", str(ext)])
    return crt, key


def kubeconfig(server: str, ca: Path, crt: Path, key: Path, user: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "local", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"client-certificate": str(crt), "client-key": str(key)}}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
        "current-context": "local",
    }


def registry_config(storage: Path, addr: str) -> dict[str, Any]:
    """The pinned distribution registry's config: filesystem storage, plain HTTP on `addr` (loopback)."""
    return {
        "version": 0.1,
        "log": {"level": "warn", "accesslog": {"disabled": True}},
        "storage": {"filesystem": {"rootdirectory": str(storage)}, "delete": {"enabled": True}},
        "http": {"addr": addr, "secret": "local-only"},
    }


@dataclass
class RealNode:
    """containerd + kubelet + kube-proxy inside `sandbox` (real-0, in the cluster's own namespace, also runs
    the registry); real node `index` has its own namespaces, address and pod subnet."""

    sandbox: Sandbox
    pki: Path
    api_port: int
    cache: Path  # persistent across runs: the registry's storage
    lock: lockmod.Lock
    procs: dict[str, proc.Popen] = field(default_factory=dict)
    commands: dict[str, tuple[list[str], Path, dict[str, str]]] = field(default_factory=dict)
    index: int = 0
    # where the node's containerd root comes from: a store of this pool kept between clusters
    # (imagestore), else (None, or every store taken) a root in the run directory
    store_pool: Path | None = None
    store: imagestore.Claim | None = None

    @property
    def name(self) -> str:
        return node_name(self.index)

    @property
    def ip(self) -> str:
        return node_ip(self.index)

    @property
    def pod_subnet(self) -> str:
        return pod_subnet(self.index)

    @property
    def registry(self) -> str:
        """Where this node's containerd pulls `localhost:5000/...` from: the registry on real-0's namespace."""
        return MIRROR if self.index == 0 else f"{NODE_IP}:{REGISTRY_PORT}"

    @property
    def linked(self) -> bool:
        """Whether the node has a link of its own to the cluster (every real node but real-0, which shares the
        control plane's namespace)."""
        return self.sandbox.parent is not None

    def link_bytes(self) -> dict[str, int]:
        """Bytes received and sent on the node's link to the cluster (the kernel's counters)."""
        return self.sandbox.link_bytes()

    @property
    def dir(self) -> Path:
        return self.sandbox.workdir / "node"

    @property
    def logs_dir(self) -> Path:
        return self.sandbox.workdir / "logs"

    @property
    def socket(self) -> Path:
        return self.dir / "containerd" / "containerd.sock"

    @property
    def containerd_root(self) -> Path:
        return self.store.root if self.store else self.dir / "containerd" / "root"

    def binaries(self) -> dict[str, Path]:
        return {name: tools.require(name, self.lock) for name in BINARIES}

    # -- configuration --------------------------------------------------------------------------
    def check_socket_paths(self) -> None:
        """One clear line when the node's directory is too deep for the unix sockets under it.

        containerd and the kubelet bind sockets below the node directory; Linux caps a socket's path
        at 107 characters, past which containerd dies with an error that hides the cause."""
        longest = max((self.dir / sub for sub in SOCKETS), key=lambda p: len(str(p)))
        if len(str(longest)) > MAX_SOCKET_PATH:
            raise UserError(
                f"node {self.name}: the socket path {longest} is {len(str(longest))} characters, over Linux's "
                f"{MAX_SOCKET_PATH}", "set TRAINSTACK_CACHE to a shorter directory (the run directories live under it)")

    def write_config(self) -> None:
        self.check_socket_paths()
        b = self.binaries()
        d = self.dir
        if self.store_pool is not None and self.store is None:
            self.store = imagestore.claim(self.store_pool)
        for sub in ("containerd/root", "containerd/state", "runc", "cni/net.d", "cni/ipam", "kubelet", "pods",
                    "hosts", "volumes", "resolv"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        # shim binary next to containerd on its PATH
        (d / "bin").mkdir(exist_ok=True)
        for name in ("containerd-shim-runc-v2",):
            link = d / "bin" / name
            if not link.exists():
                link.symlink_to(b[name])
        hosts = d / "hosts" / MIRROR
        hosts.mkdir(parents=True, exist_ok=True)
        (hosts / "hosts.toml").write_text(
            f'server = "http://{self.registry}"\n\n[host."http://{self.registry}"]\n  capabilities = ["pull", "resolve"]\n'
        )
        (d / "containerd.toml").write_text(f"""version = 3
root = "{self.containerd_root}"
state = "{d}/containerd/state"
[grpc]
  address = "{self.socket}"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{self.pause_image()}"
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = "{d}/hosts"
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_unprivileged_ports = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
    BinaryName = "{RUNC}"
    Root = "{d}/runc"
    SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["{CNI_BIN}"]
    conf_dir = "{d}/cni/net.d"
[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
""")
        (d / "cni/net.d/10-trainstack.conflist").write_text(json.dumps({
            "cniVersion": "1.0.0", "name": "trainstack",
            "plugins": [
                {"type": "bridge", "bridge": "ts0", "isGateway": True, "ipMasq": False, "hairpinMode": True,
                 "ipam": {"type": "host-local", "dataDir": str(d / "cni/ipam"),
                          "ranges": [[{"subnet": self.pod_subnet, "gateway": self.pod_subnet.replace(".0/24", ".1")}]],
                          "routes": [{"dst": "0.0.0.0/0"}]}},
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }, indent=2))
        (d / "resolv" / "resolv.conf").write_text("# no upstream DNS: the cluster has no route out\n")
        # real-0 shares the API server's namespace; the others reach it on the cluster's link
        server = f"https://{'127.0.0.1' if self.index == 0 else NODE_IP}:{self.api_port}"
        ca = self.pki / "ca.crt"
        crt, key = sign_cert(self.pki, "node" if self.index == 0 else f"node-{self.index}",
                             f"/O=system:nodes/CN=system:node:{self.name}", (self.ip, "127.0.0.1"))
        pcrt, pkey = sign_cert(self.pki, "kube-proxy", "/CN=system:kube-proxy")
        rcrt, rkey = sign_cert(self.pki, "kube-router", f"/CN={netpol.USER}")
        (d / "kubelet.kubeconfig").write_text(yaml.safe_dump(kubeconfig(server, ca, crt, key, "node")))
        (d / "kube-proxy.kubeconfig").write_text(yaml.safe_dump(kubeconfig(server, ca, pcrt, pkey, "kube-proxy")))
        (d / "kube-router.kubeconfig").write_text(yaml.safe_dump(kubeconfig(server, ca, rcrt, rkey, "kube-router")))
        (d / "kubelet.yaml").write_text(yaml.safe_dump({
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "failCgroupV1": False,  # cgroup v1 hosts
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": self.sandbox.cgroup,
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "address": self.ip, "port": 10250, "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "healthzPort": 10248,
            "tlsCertFile": str(crt), "tlsPrivateKeyFile": str(key),
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                               "x509": {"clientCAFile": str(ca)}},
            "authorization": {"mode": "Webhook"},
            "clusterDNS": [DNS_IP], "clusterDomain": CLUSTER_DOMAIN,
            "resolvConf": str(d / "resolv" / "resolv.conf"),
            "podLogsDir": str(d / "pods"),
            **KUBELET_TUNING,
            # The node's filesystem is the host's, which a test machine shares: a percentage of a large,
            # mostly full disk (1% of 252 GiB is 2.5 GiB) can put the node under DiskPressure while gigabytes
            # were free, tainting it and leaving the controllers unscheduled. Evict only when it is
            # nearly out of space.
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "256Mi", "imagefs.available": "256Mi",
                             "nodefs.inodesFree": "1%"},
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "protectKernelDefaults": False,
            "shutdownGracePeriod": "0s",
            "maxPods": 110,
        }, sort_keys=False))
        (d / "kube-proxy.yaml").write_text(yaml.safe_dump({
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
            "mode": "iptables",
            "clientConnection": {"kubeconfig": str(d / "kube-proxy.kubeconfig")},
            "hostnameOverride": self.name,
            "clusterCIDR": CLUSTER_POD_CIDR,
            "healthzBindAddress": "127.0.0.1:10256", "metricsBindAddress": "127.0.0.1:10249",
            "conntrack": {"maxPerCore": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        }, sort_keys=False))
        self.write_registry_config()

    def write_registry_config(self) -> None:
        (self.dir / "registry.yaml").write_text(yaml.safe_dump(
            # every node's containerd pulls from it on the cluster's link (inside the cluster's namespaces)
            registry_config(self.cache / "registry", f"0.0.0.0:{REGISTRY_PORT}")))

    def pause_image(self) -> str:
        return images.reference("pause", self.lock)

    # -- processes ------------------------------------------------------------------------------
    def start_registry(self) -> None:
        b = self.binaries()
        (self.cache / "registry").mkdir(parents=True, exist_ok=True)
        self.procs["registry"] = self.sandbox.start(
            "registry", [str(b["registry"]), "serve", str(self.dir / "registry.yaml")], self.logs_dir / "registry.log",
            # no trace exporter: it would retry localhost:4318 in the cluster's namespace and log each failure
            env={**os.environ, "OTEL_TRACES_EXPORTER": "none"})
        self._wait_tcp(REGISTRY_PORT, "registry")

    def collect_registry_garbage(self) -> str:
        """Delete the registry storage's blobs no tag reaches any more (an image rebuilt under its tag leaves
        the old one's, gigabytes for torch): `registry garbage-collect --delete-untagged`, run while nothing
        is pushed (after the builds, before the nodes pull). Its last line, for the log."""
        b = self.binaries()
        with paths.exclusive(images.REGISTRY_LOCK):  # no other cluster pushes meanwhile (the storage is shared)
            result = proc.run([str(b["registry"]), "garbage-collect", "--delete-untagged",
                               str(self.dir / "registry.yaml")],
                              check=False, timeout=600, stdin=proc.DEVNULL, what="registry garbage-collect")
        if result.returncode != 0:
            raise UserError(f"registry garbage-collect failed: {(result.stderr or result.stdout).strip()[-300:]}")
        return (result.stdout.strip().splitlines() or [""])[-1]

    def start(self, registry_digest: Callable[[str], str | None] | None = None) -> None:
        """containerd, then (on a reused image store, with `registry_digest`) the store's stale tags
        removed, then kubelet and kube-proxy (kube-router comes once the Node exists: start_netpol)."""
        b = self.binaries()
        env = {"PATH": f"{self.dir / 'bin'}:{Path(b['containerd']).parent}:/usr/sbin:/usr/bin:/sbin:/bin"}
        self.procs["containerd"] = self._start(
            "containerd", [str(b["containerd"]), "--config", str(self.dir / "containerd.toml")],
            self.logs_dir / "containerd.log", env=env)
        self._wait_socket()
        if self.store and self.store.reused and registry_digest is not None:
            self.drop_stale_images(registry_digest)
        self.procs["kubelet"] = self._start("kubelet", [
            str(b["kubelet"]), "--config", str(self.dir / "kubelet.yaml"),
            "--kubeconfig", str(self.dir / "kubelet.kubeconfig"), "--root-dir", str(self.dir / "kubelet"),
            "--node-ip", self.ip, "--hostname-override", self.name,
            "--node-labels", "trainstack.io/pool=cpu,trainstack.io/node=real", "--v=1",
        ], self.logs_dir / "kubelet.log", env=env)
        self.procs["kube-proxy"] = self._start(
            "kube-proxy", [str(b["kube-proxy"]), "--config", str(self.dir / "kube-proxy.yaml"), "--v=1"],
            self.logs_dir / "kube-proxy.log", env=env)

    def start_netpol(self) -> None:
        """kube-router's NetworkPolicy firewall (cluster/netpol.py); it reads this node's Node at start, so
        only once the kubelet has registered it."""
        b = self.binaries()
        env = {"PATH": f"{netpol.legacy_bin(self.dir / 'netpol-bin')}:/usr/sbin:/usr/bin:/sbin:/bin"}  # ipset
        self.procs["kube-router"] = self._start(
            "kube-router", netpol.command(b["kube-router"], self.dir / "kube-router.kubeconfig", self.name, SERVICE_CIDR),
            self.logs_dir / "kube-router.log", env=env)

    def wait_netpol(self, timeout: float = 30) -> None:
        """Until kube-router's first sync is in the node's iptables (before that it enforces nothing)."""
        daemon = self.procs["kube-router"]
        if not self.sandbox.wait_until(netpol.SYNCED_PROBE, timeout, alive=lambda: daemon.poll() is None):
            raise UserError(f"kube-router (NetworkPolicy) on node {self.name} is not healthy: "
                            f"{self.log_tail('kube-router')}", f"log: {self.logs_dir / 'kube-router.log'}")

    def ctr(self, *args: str) -> str:
        """`ctr` on this node's containerd, in the kubelet's (CRI's) namespace."""
        return proc.run([str(self.binaries()["ctr"]), "--address", str(self.socket), "--namespace", "k8s.io", *args],
                        timeout=120, stdin=proc.DEVNULL, what=f"ctr on node {self.name}").stdout

    def drop_stale_images(self, registry_digest: Callable[[str], str | None]) -> list[str]:
        """Remove the store's images whose tag the registry now serves at another digest (or not at all)."""
        stale = imagestore.stale_refs(self.ctr("images", "ls"), registry_digest)
        if stale:
            self.ctr("images", "rm", *stale)
        return stale

    def _start(self, name: str, cmd: list[str], log: Path, env: dict[str, str]) -> proc.Popen:
        self.commands[name] = (cmd, log, env)
        return self.sandbox.start(name, cmd, log, env=env)

    def restart(self, name: str, kill: bool = False) -> float:
        """Stop one node daemon (kubelet, containerd, kube-proxy) and start it again as it was started (a fault
        test: what systemd does on a crash or `systemctl restart`). Running containers keep running (their
        shims outlive containerd; kubelet re-adopts its pods). Returns the seconds it was away."""
        daemon = self.procs.get(name)
        if daemon is None or name not in self.commands:
            raise UserError(f"real node {self.name} has no running {name}")
        start = time.monotonic()
        if kill:
            daemon.kill()
        else:
            daemon.terminate()
        try:
            daemon.wait(timeout=20)
        except proc.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        cmd, log, env = self.commands[name]
        self.procs[name] = self.sandbox.start(name, cmd, log, env=env)
        if name == "containerd":
            self._wait_socket()
        return time.monotonic() - start

    def lose(self) -> None:
        """The machine is lost: its link to the cluster goes down first (nothing it sends gets out, as with a
        pulled cable or a dead host), then every process of the node is killed at once, containers included.
        Only a further node can be lost: real-0 shares the control plane's namespace."""
        if self.sandbox.parent is None:
            raise UserError(f"{self.name} shares the control plane's namespace: only real-1 and later can be lost")
        self.sandbox.set_link(up=False)
        sandboxmod.kill_all(self.sandbox)
        for daemon in self.procs.values():
            daemon.wait()

    def rejoin(self) -> None:
        """The machine is back: its link comes up and its daemons start again as they were first started."""
        self.sandbox.set_link(up=True)
        self.socket.unlink(missing_ok=True)  # the dead containerd's socket: kubelet must wait for the new one
        for name in ("containerd", "kubelet", "kube-proxy"):
            cmd, log, env = self.commands[name]
            self.procs[name] = self.sandbox.start(name, cmd, log, env=env)
            if name == "containerd":
                self._wait_socket()

    def _wait_socket(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not self.socket.exists():
            if self.procs["containerd"].poll() is not None or time.monotonic() > deadline:
                raise UserError(f"containerd did not start: {self.log_tail('containerd')}",
                                f"log: {self.logs_dir / 'containerd.log'}")
            time.sleep(0.1)

    def _wait_tcp(self, port: int, what: str, timeout: float = 20) -> None:
        if not self.sandbox.wait_listening(port, timeout):
            raise UserError(f"{what} did not listen on 127.0.0.1:{port} in the cluster's namespace: "
                            f"{self.log_tail(what)}", f"log: {self.logs_dir / (what + '.log')}")

    def log_tail(self, component: str, lines: int = 2) -> str:
        return sandboxmod.log_tail(self.logs_dir / f"{component}.log", lines)

    def logs(self) -> dict[str, Path]:
        return {name: self.logs_dir / f"{name}.log" for name in ("registry", "containerd", "kubelet", "kube-proxy",
                                                                 "kube-router")
                if (self.logs_dir / f"{name}.log").is_file()}

    def stop(self) -> None:
        """kubelet first (no new pods), then containerd and the rest; the sandbox removes the containers."""
        first = [self.procs[n] for n in ("kubelet", "kube-proxy", "kube-router") if n in self.procs]
        sandboxmod.stop_all(first)
        sandboxmod.stop_all([p for p in self.procs.values() if p not in first])
        self.procs.clear()
        if self.store:
            self.store.release()
