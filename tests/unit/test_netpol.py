"""NetworkPolicy on the real nodes (cluster/netpol.py) and the probe the e2e uses to show it (e2e/netreach.py):
kube-router runs its firewall alone, as a read-only identity, and the probe tells a refused port from an
open one."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

from trainstack.cluster import netpol
from trainstack.e2e import netreach


def test_kube_router_runs_only_its_firewall_on_its_node():
    cmd = netpol.command(Path("/bin/kube-router"), Path("/n/kube-router.kubeconfig"), "real-1", "10.96.0.0/16")
    assert {"--run-firewall=true", "--run-router=false", "--run-service-proxy=false"} <= set(cmd)
    assert "--hostname-override=real-1" in cmd and "--service-cluster-ip-range=10.96.0.0/16" in cmd


def test_its_identity_reads_what_policies_need_and_writes_nothing_but_events():
    role, binding = netpol.rbac_objects()
    writes = {(g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
              if set(rule["verbs"]) - {"get", "list", "watch"}}
    reads = {(g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
             if {"list", "watch"} <= set(rule["verbs"])}
    assert {("", "pods"), ("", "namespaces"), ("networking.k8s.io", "networkpolicies"), ("", "nodes")} <= reads
    assert {r for _, r in writes} == {"events"}
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": netpol.USER}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]


def probe(port: int, window: float) -> dict:
    out = subprocess.run([sys.executable, "-c", netreach.PROBE, "127.0.0.1", str(port), str(window)],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    return json.loads(out)


def test_the_probe_reports_an_open_port_at_once_and_a_refused_one_for_its_whole_window():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        opened = probe(port, 5)
    assert opened["connected_after_s"] is not None and opened["failed_attempts"] == 0
    refused = probe(port, 1)  # closed now: every attempt refused for one second
    assert refused["connected_after_s"] is None and refused["failed_attempts"] >= 2
    assert refused["errors"] == ["ConnectionRefusedError"]


def test_the_isolation_probe_tries_each_target_for_its_window_and_reports_when():
    """e2e/isolation.py's probe: every target in turn, an open one at once, a refused one for the whole window, the
    window's wall-clock start and end (checked against when the TrainJob's rank 0 ended)."""
    from trainstack.e2e import isolation

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        with socket.socket() as closed:
            closed.bind(("127.0.0.1", 0))  # bound, never listening: refused
            shut = closed.getsockname()[1]
            targets = [["127.0.0.1", port], ["127.0.0.1", shut]]
            out = subprocess.run([sys.executable, "-c", isolation.PROBE, json.dumps(targets), "1", ""],
                                 capture_output=True, text=True, timeout=30, check=True).stdout
    result = json.loads(out)
    assert result[f"127.0.0.1:{port}"]["connected_after_s"] is not None
    refused = result[f"127.0.0.1:{shut}"]
    assert refused["connected_after_s"] is None and refused["failed_attempts"] >= 2
    assert refused["errors"] == ["ConnectionRefusedError"]
    assert 1 <= result["window_end"] - result["window_start"] < 10 and "scrape" not in result

