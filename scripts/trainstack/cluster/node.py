"""A real node for the local cluster: containerd, kubelet and kube-proxy inside the cluster's sandbox.

All pinned: kubelet and kube-proxy from the control plane's k8s.io/kubernetes version, containerd
2.x from its module, runc and the CNI plugins from the pinned Debian packages (`prereqs.py`).
Pods get addresses on a bridge inside the sandbox's network namespace; kube-proxy programs the
Service rules there (iptables mode). The registry (the cluster's image mirror) runs on the
namespace's loopback; containerd pulls every image from it over plain HTTP, as a mirrored
cluster does. PersistentVolumeClaims bind to static hostPath PVs the provider creates
(`static_volumes`): the PV controller in kube-controller-manager binds them for real, with no
provisioner binary to build, and their directories live in the run's work dir, so a claim's
data outlives its pods but not the cluster.

Settings this host kind needs (see the README): `failCgroupV1: false` and the cgroupfs driver
(cgroup v1), containerd `restrict_oom_score_adj = true` (root lacks CAP_SYS_RESOURCE).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .. import images, proc, tools
from .. import lock as lockmod
from ..errors import UserError
from . import sandbox as sandboxmod
from .sandbox import NODE_IP, Sandbox

NODE_NAME = "real-0"
POD_SUBNET = "10.244.0.0/24"
POD_GATEWAY = "10.244.0.1"
SERVICE_CIDR = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"
DNS_IP = "10.96.0.10"
CLUSTER_DOMAIN = "cluster.local"
REGISTRY_PORT = 5000
MIRROR = f"localhost:{REGISTRY_PORT}"
RUNC = "/usr/sbin/runc"
CNI_BIN = "/usr/lib/cni"
BINARIES = ("kubelet", "kube-proxy", "containerd", "containerd-shim-runc-v2", "ctr", "registry")
STORAGE_CLASS = "standard"


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
    """containerd + kubelet + kube-proxy (+ the registry) inside `sandbox`."""

    sandbox: Sandbox
    pki: Path
    api_port: int
    cache: Path  # persistent across runs: the registry's storage
    lock: lockmod.Lock
    procs: dict[str, proc.Popen] = field(default_factory=dict)
    commands: dict[str, tuple[list[str], Path, dict[str, str]]] = field(default_factory=dict)

    @property
    def dir(self) -> Path:
        return self.sandbox.workdir / "node"

    @property
    def logs_dir(self) -> Path:
        return self.sandbox.workdir / "logs"

    @property
    def socket(self) -> Path:
        return self.dir / "containerd" / "containerd.sock"

    def binaries(self) -> dict[str, Path]:
        return {name: tools.require(name, self.lock) for name in BINARIES}

    # -- configuration --------------------------------------------------------------------------
    def write_config(self) -> None:
        b = self.binaries()
        d = self.dir
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
            f'server = "http://{MIRROR}"\n\n[host."http://{MIRROR}"]\n  capabilities = ["pull", "resolve"]\n'
        )
        (d / "containerd.toml").write_text(f"""version = 3
root = "{d}/containerd/root"
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
                          "ranges": [[{"subnet": POD_SUBNET, "gateway": POD_GATEWAY}]],
                          "routes": [{"dst": "0.0.0.0/0"}]}},
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }, indent=2))
        (d / "resolv" / "resolv.conf").write_text("# no upstream DNS: the cluster has no route out\n")
        server = f"https://127.0.0.1:{self.api_port}"
        ca = self.pki / "ca.crt"
        crt, key = sign_cert(self.pki, "node", f"/O=system:nodes/CN=system:node:{NODE_NAME}", (NODE_IP, "127.0.0.1"))
        pcrt, pkey = sign_cert(self.pki, "kube-proxy", "/CN=system:kube-proxy")
        (d / "kubelet.kubeconfig").write_text(yaml.safe_dump(kubeconfig(server, ca, crt, key, "node")))
        (d / "kube-proxy.kubeconfig").write_text(yaml.safe_dump(kubeconfig(server, ca, pcrt, pkey, "kube-proxy")))
        (d / "kubelet.yaml").write_text(yaml.safe_dump({
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "failCgroupV1": False,  # cgroup v1 hosts
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": self.sandbox.cgroup,
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "address": NODE_IP, "port": 10250, "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "healthzPort": 10248,
            "tlsCertFile": str(crt), "tlsPrivateKeyFile": str(key),
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                               "x509": {"clientCAFile": str(ca)}},
            "authorization": {"mode": "Webhook"},
            "clusterDNS": [DNS_IP], "clusterDomain": CLUSTER_DOMAIN,
            "resolvConf": str(d / "resolv" / "resolv.conf"),
            "podLogsDir": str(d / "pods"),
            "serializeImagePulls": False,
            # Pods see updated Secrets sooner (the controllers wait for the certificates they write
            # into their webhook Secrets, and report ready only once the kubelet has put them in the
            # pod): a pod sync every 3 s (plus up to half of it as jitter) instead of every minute.
            "syncFrequency": "3s",
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
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
            "hostnameOverride": NODE_NAME,
            "clusterCIDR": POD_SUBNET,
            "healthzBindAddress": "127.0.0.1:10256", "metricsBindAddress": "127.0.0.1:10249",
            "conntrack": {"maxPerCore": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        }, sort_keys=False))
        self.write_registry_config()

    def write_registry_config(self) -> None:
        (self.dir / "registry.yaml").write_text(yaml.safe_dump(
            registry_config(self.cache / "registry", f"127.0.0.1:{REGISTRY_PORT}")))

    def pause_image(self) -> str:
        return images.reference("pause", self.lock)

    # -- processes ------------------------------------------------------------------------------
    def start_registry(self) -> None:
        b = self.binaries()
        (self.cache / "registry").mkdir(parents=True, exist_ok=True)
        self.procs["registry"] = self.sandbox.start(
            "registry", [str(b["registry"]), "serve", str(self.dir / "registry.yaml")], self.logs_dir / "registry.log")
        self._wait_tcp(REGISTRY_PORT, "registry")

    def start(self) -> None:
        b = self.binaries()
        env = {"PATH": f"{self.dir / 'bin'}:{Path(b['containerd']).parent}:/usr/sbin:/usr/bin:/sbin:/bin"}
        self.procs["containerd"] = self._start(
            "containerd", [str(b["containerd"]), "--config", str(self.dir / "containerd.toml")],
            self.logs_dir / "containerd.log", env=env)
        self._wait_socket()
        self.procs["kubelet"] = self._start("kubelet", [
            str(b["kubelet"]), "--config", str(self.dir / "kubelet.yaml"),
            "--kubeconfig", str(self.dir / "kubelet.kubeconfig"), "--root-dir", str(self.dir / "kubelet"),
            "--node-ip", NODE_IP, "--hostname-override", NODE_NAME,
            "--node-labels", "trainstack.io/pool=cpu,trainstack.io/node=real", "--v=1",
        ], self.logs_dir / "kubelet.log", env=env)
        self.procs["kube-proxy"] = self._start(
            "kube-proxy", [str(b["kube-proxy"]), "--config", str(self.dir / "kube-proxy.yaml"), "--v=1"],
            self.logs_dir / "kube-proxy.log", env=env)

    def _start(self, name: str, cmd: list[str], log: Path, env: dict[str, str]) -> proc.Popen:
        self.commands[name] = (cmd, log, env)
        return self.sandbox.start(name, cmd, log, env=env)

    def restart(self, name: str, kill: bool = False) -> float:
        """Stop one node daemon (kubelet, containerd, kube-proxy) and start it again as it was started (a fault
        test: what systemd does on a crash or `systemctl restart`). Running containers keep running (their
        shims outlive containerd; kubelet re-adopts its pods). Returns the seconds it was away."""
        daemon = self.procs.get(name)
        if daemon is None or name not in self.commands:
            raise UserError(f"the real node has no running {name}")
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
        return {name: self.logs_dir / f"{name}.log" for name in ("registry", "containerd", "kubelet", "kube-proxy")
                if (self.logs_dir / f"{name}.log").is_file()}

    def stop(self) -> None:
        """kubelet first (no new pods), then containerd and the rest; the sandbox removes the containers."""
        first = [self.procs[n] for n in ("kubelet", "kube-proxy") if n in self.procs]
        sandboxmod.stop_all(first)
        sandboxmod.stop_all([p for p in self.procs.values() if p not in first])
        self.procs.clear()


def static_volumes(workdir: Path, count: int = 24, size: str = "100Gi") -> list[dict[str, Any]]:
    """A default StorageClass with no provisioner and `count` hostPath PVs for it (one directory each)."""
    objects: list[dict[str, Any]] = [{
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": STORAGE_CLASS, "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "Immediate",
        "reclaimPolicy": "Retain",
    }]
    for i in range(count):
        path = workdir / "volumes" / f"pv-{i}"
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o1777)
        objects.append({
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": f"local-pv-{i}", "labels": {"trainstack.io/volume": "static"}},
            "spec": {
                "capacity": {"storage": size}, "accessModes": ["ReadWriteOnce", "ReadWriteMany"],
                "persistentVolumeReclaimPolicy": "Retain", "storageClassName": STORAGE_CLASS,
                # No node affinity: the one real node mounts it, and KWOK's simulated pods may claim one too.
                "hostPath": {"path": str(path), "type": "Directory"},
            },
        })
    return objects


COREFILE = f""".:1053 {{
    errors
    health :8080
    ready :8181
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }}
    cache 30
    loadbalance
}}
"""


def coredns_objects(image: str) -> list[dict[str, Any]]:
    """Cluster DNS as a pod: CoreDNS (non-root on port 1053) behind the `kube-dns` Service at DNS_IP."""
    labels = {"k8s-app": "kube-dns"}
    meta = {"namespace": "kube-system", "labels": labels}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "coredns", **meta}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "trainstack:coredns"},
         "rules": [{"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"],
                    "verbs": ["list", "watch"]},
                   {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "trainstack:coredns"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "trainstack:coredns"},
         "subjects": [{"kind": "ServiceAccount", "name": "coredns", "namespace": "kube-system"}]},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "coredns", **meta},
         "data": {"Corefile": COREFILE}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "coredns", **meta},
         "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels}, "spec": {
                      "serviceAccountName": "coredns", "dnsPolicy": "Default", "priorityClassName": "system-cluster-critical",
                      "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
                      "containers": [{
                          "name": "coredns", "image": image, "imagePullPolicy": "IfNotPresent",
                          "args": ["-conf", "/etc/coredns/Corefile"],
                          "ports": [{"name": "dns", "containerPort": 1053, "protocol": "UDP"},
                                    {"name": "dns-tcp", "containerPort": 1053, "protocol": "TCP"}],
                          "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181}, "periodSeconds": 2},
                          "livenessProbe": {"httpGet": {"path": "/health", "port": 8080}, "periodSeconds": 10},
                          "resources": {"requests": {"cpu": "20m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}},
                          "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                              "capabilities": {"drop": ["ALL"]}},
                          "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns"}],
                      }],
                      "volumes": [{"name": "config", "configMap": {"name": "coredns"}}],
                  }}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "kube-dns", **meta},
         "spec": {"clusterIP": DNS_IP, "selector": labels,
                  "ports": [{"name": "dns", "port": 53, "targetPort": 1053, "protocol": "UDP"},
                            {"name": "dns-tcp", "port": 53, "targetPort": 1053, "protocol": "TCP"}]}},
    ]
