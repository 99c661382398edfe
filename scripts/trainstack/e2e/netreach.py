"""Who reaches the tracking server: the chart's NetworkPolicy, enforced on the real nodes.

The `trainstack-tracking` NetworkPolicy admits to the server's port only the tracked namespaces. On the
local cluster kube-router enforces it on every real node (cluster/netpol.py). `start` runs probe pods on
the real nodes, beside whatever step follows (the e2e's SDK torch TrainJob): one in a tracked namespace on a node other than the
server's (the routed path; the server's own node where there is one real node), and one in a namespace
nobody tracks on the server's node (the bridged path) and on another node. Each tries to open a TCP
connection to the tracking Service, the way a training pod does, and prints what happened as JSON.
`finish` waits for them: the tracked probe must connect, the others must be refused every time for
REFUSED_WINDOW seconds. The probes are deleted afterwards; the untracked namespace stays (a run's
cluster goes with it; a shared one keeps an empty namespace).

A tracked pod may be refused for its first fraction of a second: kube-router admits a source pod once it
has seen the pod's address in the pod's status, as iptables-based enforcers do. The tracked probe
therefore retries, and reports after how long it got through.
"""

from __future__ import annotations

import json
import time
from typing import Any

import yaml

from .. import images, kubeapi
from .. import lock as lockmod
from ..errors import UserError
from ..jsontypes import dig
from .base import NAMESPACE

UNTRACKED_NS = "trainstack-e2e-untracked"  # a namespace the tracking server's NetworkPolicy does not name
SERVER_LABEL = "app.kubernetes.io/component=tracking"
PROBE_LABEL = "trainstack.io/e2e-probe"
REFUSED_WINDOW = 3.0  # seconds an untracked probe keeps trying
ADMITTED_WINDOW = 20.0  # seconds a tracked probe may take to get through
PROBE = r"""
import json, socket, sys, time
host, port, window = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
start, errors, connected = time.monotonic(), [], None
while time.monotonic() - start < window:
    try:
        socket.create_connection((host, port), timeout=2).close()
        connected = round(time.monotonic() - start, 2)
        break
    except OSError as err:
        errors.append(type(err).__name__)
        time.sleep(0.2)
print(json.dumps({"connected_after_s": connected, "failed_attempts": len(errors), "errors": sorted(set(errors))}))
"""


class ReachFailure(UserError):
    pass


def _pod(name: str, namespace: str, node: str, image: str, service: str, port: int, window: float) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {PROBE_LABEL: "tracking"}},
            "spec": {"nodeName": node, "restartPolicy": "Never", "automountServiceAccountToken": False,
                     "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
                     "containers": [{
                         "name": "probe", "image": image, "imagePullPolicy": "IfNotPresent",
                         "command": ["python3", "-c", PROBE, f"{service}.{NAMESPACE}", str(port), str(window)],
                         "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
                         "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                             "readOnlyRootFilesystem": True}}]}}


def start(kube: Any, lock: lockmod.Lock, tracked_ns: str, service: str, port: int) -> list[dict[str, Any]]:
    """Create the probe pods (see the module's docstring); returns what each is expected to show."""
    api = kubeapi.for_kube(kube)
    servers = kubeapi.items(api, kubeapi.resource(api, "pods", NAMESPACE), label_selector=SERVER_LABEL)
    server_node = next((p["spec"].get("nodeName") for p in servers if p["spec"].get("nodeName")), None)
    if server_node is None:
        raise ReachFailure(f"no tracking server pod ({SERVER_LABEL}) in {NAMESPACE} is on a node")
    real = sorted(n["metadata"]["name"] for n in kubeapi.items(api, kubeapi.resource(api, "nodes"),
                                                                   label_selector="trainstack.io/node=real"))
    other = next((n for n in real if n != server_node), None)
    probes = [{"namespace": tracked_ns, "node": other or server_node, "expect": "admitted"},
              {"namespace": UNTRACKED_NS, "node": server_node, "expect": "refused"},
              *([{"namespace": UNTRACKED_NS, "node": other, "expect": "refused"}] if other else [])]
    kube.kubectl("create", "namespace", UNTRACKED_NS, check=False)
    image = images.reference("python", lock)
    stamp = f"{int(time.time()) % 100000}"
    for i, probe in enumerate(probes):
        probe["pod"] = f"tracking-probe-{stamp}-{i}"
        probe["server_node"] = server_node
    kube.kubectl("apply", "-f", "-", input_text=yaml.safe_dump_all([
        _pod(p["pod"], p["namespace"], p["node"], image, service, port,
             ADMITTED_WINDOW if p["expect"] == "admitted" else REFUSED_WINDOW) for p in probes]))
    return probes


def _ended(name: str) -> Any:
    """A wait_for predicate: pod NAME has ended."""
    def done(objects: dict[str, dict[str, Any]]) -> bool:
        return dig(objects, name, "status", "phase") in ("Succeeded", "Failed")
    return done


def finish(kube: Any, probes: list[dict[str, Any]], timeout: float = 90) -> list[dict[str, Any]]:
    """Wait for PROBES to end; each one's result beside what was expected. A ReachFailure names a tracked probe
    that could not connect, or an untracked one that did."""
    api = kubeapi.for_kube(kube)
    deadline = time.monotonic() + timeout
    try:
        for probe in probes:
            pods = kubeapi.resource(api, "pods", probe["namespace"])
            phase = kubeapi.wait_for(api, pods, _ended(probe["pod"]), timeout=max(1.0, deadline - time.monotonic()))
            if not phase:
                raise ReachFailure(f"probe pod {probe['namespace']}/{probe['pod']} on {probe['node']} did not end "
                                   f"within {timeout:.0f}s")
            out = kube.kubectl("logs", probe["pod"], "-n", probe["namespace"], check=False).stdout.strip()
            try:
                probe.update(json.loads(out.splitlines()[-1]))
            except (ValueError, IndexError):
                raise ReachFailure(f"probe pod {probe['namespace']}/{probe['pod']} printed no result: {out[-200:]!r}") from None
            probe["connected"] = probe["connected_after_s"] is not None
    finally:
        for namespace in {p["namespace"] for p in probes}:
            kube.kubectl("delete", "pods", "-n", namespace, "-l", PROBE_LABEL, "--wait=false", check=False)
    wrong = [p for p in probes if p["connected"] != (p["expect"] == "admitted")]
    if wrong:
        raise ReachFailure("; ".join(
            f"a pod in {p['namespace']} on {p['node']} {'reached' if p['connected'] else 'could not reach'} the "
            f"tracking server on {p['server_node']} ({p['failed_attempts']} failed attempts: {', '.join(p['errors'])})"
            for p in wrong))
    return probes
