"""NetworkPolicy on the local cluster's real nodes: kube-router's firewall, and nothing else of it.

The pod network (a bridge per node, host-local addresses, routes the provider writes) enforces no
policy by itself, so the chart's NetworkPolicies (the tracking server's, the controllers' metrics
ports) would be objects only. Each real node runs the pinned kube-router with only its network
policy controller (`--run-firewall`; no BGP routing, no service proxy: the bridge, the routes and
kube-proxy keep those jobs). In the node's network namespace it keeps iptables chains (the legacy
filter table, apart from kube-proxy's: LEGACY) and ipsets
that admit to each selected pod only what its policies allow, on routed traffic (from other nodes)
and on bridged traffic (from pods of the same node: the namespace's `bridge-nf-call-iptables` is on).
Traffic from the node itself (the kubelet's probes, and on real-0 the API server calling webhooks) is
admitted, as kube-router does on any cluster.

It reads Pods, Namespaces, NetworkPolicies, Nodes, Services and endpoints as `system:kube-router`,
a certificate the cluster's CA signs, bound to the ClusterRole below (`rbac_objects`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

USER = "system:kube-router"
ROLE = "trainstack:kube-router"
HEALTH_PORT = 20244  # kube-router's default, on the node's own address (each node has its namespace)
# kube-router keeps its rules in the legacy (x_tables) filter table, kube-proxy its own in nftables' (Debian's
# default `iptables`): kube-router 2.1.0 writes back the whole filter table it read a moment before
# (iptables-save, then iptables-restore without --noflush), which undid kube-proxy's changes made in between (a
# Service that had just got endpoints kept rejecting connections until kube-proxy's next sync; seen as Kueue's
# webhook refusing the API server). In two tables they cannot overwrite each other; a packet passes both.
LEGACY = {"iptables": "/usr/sbin/iptables-legacy", "iptables-save": "/usr/sbin/iptables-legacy-save",
          "iptables-restore": "/usr/sbin/iptables-legacy-restore"}
# Exits 0 once kube-router's first sync put its chain into the namespace's FORWARD chain: from then on
# every selected pod's traffic goes through its policies (its /healthz answers before anything synced).
SYNCED_PROBE = "iptables-legacy -w 5 -S FORWARD | grep -q -- '-j KUBE-ROUTER-FORWARD'"


def legacy_bin(directory: Path) -> Path:
    """DIRECTORY holding `iptables`, `iptables-save` and `iptables-restore` that are the legacy ones: first on
    kube-router's PATH."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, target in LEGACY.items():
        link = directory / name
        if not link.is_symlink():
            link.symlink_to(target)
    return directory


def rbac_objects() -> list[dict[str, Any]]:
    """What kube-router's informers list and watch, granted to USER (read only, plus its events)."""
    read = ["get", "list", "watch"]
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": ROLE},
         "rules": [{"apiGroups": [""], "resources": ["namespaces", "pods", "services", "nodes", "endpoints"],
                    "verbs": read},
                   {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": read},
                   {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": read},
                   {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": ROLE},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ROLE},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}]},
    ]


def command(binary: Path, kubeconfig: Path, node: str, service_cidr: str) -> list[str]:
    """kube-router on NODE with its firewall alone."""
    return [str(binary), "--run-firewall=true", "--run-router=false", "--run-service-proxy=false",
            f"--kubeconfig={kubeconfig}", f"--hostname-override={node}",
            f"--service-cluster-ip-range={service_cidr}", f"--health-port={HEALTH_PORT}", "--metrics-port=0",
            "--v=1"]
