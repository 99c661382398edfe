"""The kwokctl configuration of the local control plane: which pinned binaries run, on which ports.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler and the KWOK controller are the
pinned binaries from the tool cache, started by the pinned kwokctl (its `binary` runtime) from the
configuration `kwokctl_config` writes. With a real node the API server also answers inside the
sandbox and KWOK leaves that node alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import lock as lockmod
from .. import yamlio
from . import node as nodemod
from .kwok import stage_documents

# Binaries the control plane needs, all pinned in the lock and built by `trainstack tools install`.
BINARIES = ("kwokctl", "kwok", "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
# Components that get the lock's kubernetes.featureGates (the API server also its runtimeConfig).
GATED_COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
# Names pods use for the API server (the `kubernetes` Service's first address included), and the
# address further real nodes' kubelets and kube-proxies reach it on (the cluster's link).
REAL_NODE_SANS = (nodemod.NODE_IP, "10.96.0.1", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                  "kubernetes.default.svc.cluster.local")
# Components in the order kwokctl starts them; with a port base they get base+0.. in this order.
PORT_NAMES = ("etcd", "etcd-peer", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok-controller")
# The scheduler's configuration file in the cluster's folder (scheduler_configuration): the API limits kwokctl's
# disableQPSLimits gives the other components, and the longest wait between two tries of an unplaced pod.
SCHEDULER_CONFIG = "kube-scheduler.yaml"
SCHEDULER_QPS = 5000
SCHEDULER_BURST = 10000
SCHEDULER_MAX_BACKOFF_S = 2


def kwokctl_config(lock: lockmod.Lock, binaries: dict[str, Path], workdir: Path, ports: dict[str, int],
                   cert_sans: tuple[str, ...], real_node: bool, pki: Path,
                   host_namespaces: tuple[str, ...]) -> list[dict[str, Any]]:
    """The KwokctlConfiguration (binaries, ports, SANs, the real node's patches), then KWOK's stages."""
    b = binaries
    options: dict[str, Any] = {
        "runtime": "binary",
        "kubeVersion": lock.kubernetes_version,
        "bindAddress": "127.0.0.1",
        "kubeApiserverBinary": str(b["kube-apiserver"]),
        "kubeControllerManagerBinary": str(b["kube-controller-manager"]),
        "kubeSchedulerBinary": str(b["kube-scheduler"]),
        "kubectlBinary": str(b["kubectl"]),
        "etcdBinary": str(b["etcd"]),
        "kwokControllerBinary": str(b["kwok"]),
        "cacheDir": str(workdir / "cache"),
        "kubeApiserverCertSANs": [*cert_sans, *(REAL_NODE_SANS if real_node else ())],
        "disableQPSLimits": True,
        # kwokctl copies this file into the cluster's folder with its kubeconfig added (write_scheduler_config)
        "kubeSchedulerConfig": str(workdir / SCHEDULER_CONFIG),
    }
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
    # One controller manager and one scheduler, each alone: no leader election (scheduler_configuration too).
    # Each would renew its Lease every 2 s, a large share of an idle real-node cluster's API server writes (the
    # figure: commit c4df864); and it would exit when the API server stays away past its renew deadline
    # (a fault test, a control-plane upgrade).
    alone = [{"key": "leader-elect", "value": "false", "override": True}]
    config["componentsPatches"] = [{"name": "kube-controller-manager", "extraArgs": alone}]
    if real_node:
        # Inside the sandbox: the API server also answers on the node address (pods reach it through
        # the `kubernetes` Service), Services get a CIDR kube-proxy and CoreDNS agree on, and the API
        # server reaches kubelets by InternalIP with a client certificate the kubelet trusts.
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
                *alone,
                {"key": "service-cluster-ip-range", "value": nodemod.SERVICE_CIDR},
                # Kubernetes' own node monitoring (kwokctl sets 3m20s and 25s, for thousands of fake nodes):
                # a real node that stops answering is NotReady after 50 s, as on a cluster users run
                {"key": "node-monitor-grace-period", "value": "50s", "override": True},
                {"key": "node-monitor-period", "value": "5s", "override": True},
            ]},
            # KWOK plays the kubelet only for its fake nodes, never for the real one.
            {"name": "kwok-controller", "extraArgs": [
                {"key": "manage-all-nodes", "value": "false", "override": True},
                {"key": "manage-nodes-with-annotation-selector", "value": "kwok.x-k8s.io/node=fake"},
            ]},
        ]
    config["componentsPatches"] = with_feature_gates(config.get("componentsPatches", []), lock)
    return [config, *stage_documents(lock, host_namespaces)]


def scheduler_configuration() -> dict[str, Any]:
    """The local kube-scheduler's KubeSchedulerConfiguration. A pod the scheduler could not place waits out a
    backoff before its next try unless an event requeues it (Kubernetes' default: 1 s doubling to 10 s). A gang
    never gets that event (kube-scheduler 1.36 requeues pod groups by backoff alone; docs/scheduling.md), so it
    waited up to 10 s after room appeared: here at most 2 s, for a try every 2 s per stuck gang instead of every 10.
    With a file kube-scheduler ignores kwokctl's --kube-api-qps and --kube-api-burst: the same limits are here."""
    return {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"qps": SCHEDULER_QPS, "burst": SCHEDULER_BURST},
            "leaderElection": {"leaderElect": False},  # alone, as the controller manager (kwokctl_config)
            "podInitialBackoffSeconds": 1, "podMaxBackoffSeconds": SCHEDULER_MAX_BACKOFF_S}


def write_scheduler_config(workdir: Path) -> Path:
    """The scheduler's configuration file that kwokctl_config names, in WORKDIR."""
    path = workdir / SCHEDULER_CONFIG
    path.write_text(yamlio.dump(scheduler_configuration()))
    return path


def switches(flags: dict[str, bool]) -> str:
    """`a=true,b=false`: a --feature-gates or --runtime-config value."""
    return ",".join(f"{name}={str(on).lower()}" for name, on in flags.items())


def component_gates(lock: lockmod.Lock, component: str) -> dict[str, bool]:
    """The feature gates COMPONENT of the local control plane runs with: kubernetes.featureGates, and on
    kube-scheduler kubernetes.schedulerFeatureGates after them (the scheduler's alone)."""
    gates = dict(lock.kubernetes_feature_gates)
    if component == "kube-scheduler":
        gates.update(lock.kubernetes_scheduler_feature_gates)
    return gates


def with_feature_gates(patches: list[dict[str, Any]], lock: lockmod.Lock) -> list[dict[str, Any]]:
    """PATCHES plus the lock's feature gates on the API server, controller manager and scheduler (the
    scheduler also its own, schedulerFeatureGates) and its --runtime-config on the API server (every
    cluster, real node or not): the native gang scheduler."""
    apis = lock.kubernetes_runtime_config
    extra: dict[str, list[dict[str, Any]]] = {}
    for name in GATED_COMPONENTS:
        gates = component_gates(lock, name)
        extra[name] = [{"key": "feature-gates", "value": switches(gates)}] if gates else []
    if apis:
        extra["kube-apiserver"].append({"key": "runtime-config", "value": switches(apis)})
    extra = {name: args for name, args in extra.items() if args}
    out = [dict(p, extraArgs=[*p.get("extraArgs", []), *extra.pop(p["name"], [])]) for p in patches]
    return out + [{"name": name, "extraArgs": args} for name, args in extra.items()]
