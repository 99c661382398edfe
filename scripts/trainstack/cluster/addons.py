"""What the local cluster applies for its real nodes once the API server is up: storage (a default
StorageClass and static hostPath PVs, bound by kube-controller-manager's PV controller, with no
provisioner to build) and cluster DNS (CoreDNS behind the `kube-dns` Service)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .node import CLUSTER_DOMAIN, DNS_IP

STORAGE_CLASS = "standard"


def static_volumes(workdir: Path, count: int = 48, size: str = "100Gi") -> list[dict[str, Any]]:
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


# kubeadm's Corefile (less forwarding: the cluster has no upstream) with one change: a name that does not
# resolve yet is cached for 5 s, not 30. A job's pods look up each other's names (`<job>-node-0-0.<job>`) as
# they start, often before the first pod has an address; with 30 s of negative caching the other ranks
# waited 30 s to rendezvous (files/runtimes/README.md).
COREFILE = f""".:1053 {{
    errors
    health :8080
    ready :8181
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }}
    cache 30 {{
        denial 9984 5
    }}
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
                      # cluster DNS leaves a lost node after 30 s, as the chart's controllers do (not 300 s)
                      "tolerations": [{"key": f"node.kubernetes.io/{t}", "operator": "Exists", "effect": "NoExecute",
                                       "tolerationSeconds": 30} for t in ("not-ready", "unreachable")],
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
