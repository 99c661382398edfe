"""Team network isolation (templates/teams/networkpolicy.yaml, docs/teams.md): the rendered NetworkPolicies
per team, what they admit (evaluated as Kubernetes does, from the objects), the monitoring allowance, extra
sources, the Trainer status server narrowed to the teams, and the off switch."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import ROOT, docs_of, helm_template
from trainstack import api

EXAMPLE = ROOT / "examples" / "teams" / "values.yaml"
RELEASE_NS = api.NAMESPACE  # helm_template renders the release into it
NAME = "kubernetes.io/metadata.name"
TRAINER = {"app.kubernetes.io/name": "kubeflow-trainer", "app.kubernetes.io/component": "manager",
           "app.kubernetes.io/instance": api.RELEASE}
TRAINER_PORTS = (9443, 8081, 8443, 10443)  # webhook, health, metrics, status server


def _render(*args: str) -> list[dict[str, Any]]:
    return docs_of(helm_template("-f", str(EXAMPLE), *args).stdout)


def _policies(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d.get("kind") == "NetworkPolicy"]


def _selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """Whether a LabelSelector (matchLabels, matchExpressions In/NotIn/Exists/DoesNotExist) matches LABELS."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        if ((op == "In" and labels.get(key) not in values) or (op == "NotIn" and labels.get(key) in values)
                or (op == "Exists" and key not in labels) or (op == "DoesNotExist" and key in labels)):
            return False
    return True


def admits(policies: list[dict[str, Any]], src: tuple[str, dict[str, str]], dst: tuple[str, dict[str, str]],
           port: int, ns_labels: dict[str, dict[str, str]] | None = None) -> bool:
    """Whether POLICIES admit a TCP connection from pod SRC (namespace, labels) to pod DST on PORT, as the
    NetworkPolicy API defines it: a pod no Ingress policy selects admits everything; a selected pod admits
    what any rule of any selecting policy admits. A namespace's labels are its name label plus NS_LABELS's."""
    def labels_of(ns: str) -> dict[str, str]:
        return {NAME: ns, **(ns_labels or {}).get(ns, {})}

    selecting = [p for p in policies if p["metadata"]["namespace"] == dst[0] and "Ingress" in p["spec"]["policyTypes"]
                 and _selects(p["spec"]["podSelector"], dst[1])]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get("ingress") or []:
            ports = rule.get("ports")
            if ports and not any(p.get("protocol", "TCP") == "TCP" and
                                 (p.get("port") is None or p["port"] <= port <= p.get("endPort", p["port"]))
                                 for p in ports):
                continue
            peers = rule.get("from")
            if not peers:
                return True
            for peer in peers:
                if "ipBlock" in peer:
                    continue
                in_ns = (_selects(peer["namespaceSelector"], labels_of(src[0])) if "namespaceSelector" in peer
                         else src[0] == dst[0])
                if in_ns and _selects(peer.get("podSelector"), src[1]):
                    return True
    return False


TRAINING_POD = {"jobset.sigs.k8s.io/jobset-name": "mnist", "batch.kubernetes.io/job-completion-index": "0"}
PROBE_PORTS = (29500, 2222, 8080)  # torch's rendezvous, the MPI launcher's sshd, anything else


@pytest.fixture(scope="module")
def isolated(chart_ready):
    return _policies(_render())


@pytest.mark.slow
def test_each_team_namespace_admits_only_its_own_pods(isolated):
    by_ns = {p["metadata"]["namespace"]: p for p in isolated if p["metadata"]["name"] == "trainstack-team-isolation"}
    assert sorted(by_ns) == ["team-a", "team-b"]
    for ns, policy in by_ns.items():
        assert policy["metadata"]["labels"]["trainstack.io/team"] == ns
        assert policy["spec"]["podSelector"] == {} and policy["spec"]["policyTypes"] == ["Ingress"]
        assert policy["spec"]["ingress"] == [{"from": [{"podSelector": {}}]}]
    for port in PROBE_PORTS:
        assert admits(isolated, ("team-a", {}), ("team-a", TRAINING_POD), port)
        assert not admits(isolated, ("team-b", {}), ("team-a", TRAINING_POD), port)
        assert not admits(isolated, ("elsewhere", {}), ("team-a", TRAINING_POD), port)
        assert not admits(isolated, (RELEASE_NS, {}), ("team-b", TRAINING_POD), port)
        assert not admits(isolated, ("monitoring", {}), ("team-b", TRAINING_POD), port)  # monitoring is off


@pytest.mark.slow
def test_the_trainer_status_server_admits_only_the_teams(isolated):
    trainer = (RELEASE_NS, TRAINER)
    assert admits(isolated, ("team-a", {}), trainer, 10443)
    assert admits(isolated, ("team-b", {}), trainer, 10443)
    assert not admits(isolated, ("elsewhere", {}), trainer, 10443)
    assert not admits(isolated, (RELEASE_NS, {}), trainer, 10443)
    # the webhook (the API server), health (kubelet) and, with monitoring off, metrics ports: open, as before
    for port in (9443, 8081, 8443):
        assert admits(isolated, ("elsewhere", {}), trainer, port), port


@pytest.mark.slow
def test_monitoring_scrapes_team_pods_and_the_trainer_metrics_stay_its_own(chart_ready):
    policies = _policies(_render("--set", "monitoring.enabled=true"))
    for ns in ("team-a", "team-b"):
        assert admits(policies, ("monitoring", {}), (ns, TRAINING_POD), 9090)
        assert not admits(policies, ("team-b" if ns == "team-a" else "team-a", {}), (ns, TRAINING_POD), 9090)
    trainer = (RELEASE_NS, TRAINER)
    # the metrics policy (templates/metrics.yaml) no longer opens the status server to all
    assert not admits(policies, ("elsewhere", {}), trainer, 10443)
    assert admits(policies, ("team-a", {}), trainer, 10443)
    assert not admits(policies, ("elsewhere", {}), trainer, 8443)
    assert admits(policies, ("monitoring", {}), trainer, 8443)
    assert all(admits(policies, ("elsewhere", {}), trainer, p) for p in (9443, 8081))
    # another monitoring namespace is the one admitted
    moved = _policies(_render("--set", "monitoring.enabled=true", "--set", "monitoring.namespace=observability"))
    assert admits(moved, ("observability", {}), ("team-a", TRAINING_POD), 9090)
    assert not admits(moved, ("monitoring", {}), ("team-a", TRAINING_POD), 9090)


@pytest.mark.slow
def test_extra_sources_are_admitted_to_every_team(chart_ready):
    policies = _policies(_render(
        "--set", "teams.defaults.networkPolicy.extraFrom[0].namespaceSelector.matchLabels.role=ingress"))
    labels = {"gateway": {"role": "ingress"}}
    for ns in ("team-a", "team-b"):
        assert admits(policies, ("gateway", {}), (ns, TRAINING_POD), 8080, labels)
        assert not admits(policies, ("elsewhere", {}), (ns, TRAINING_POD), 8080, labels)


@pytest.mark.slow
def test_the_off_switch_leaves_teams_and_the_trainer_open(chart_ready):
    for args in ((), ("--set", "monitoring.enabled=true")):
        policies = _policies(_render("--set", "teams.defaults.networkPolicy.enabled=false", *args))
        names = {p["metadata"]["name"] for p in policies}
        assert not names & {"trainstack-team-isolation", "trainstack-trainer-status-server"}, names
        assert admits(policies, ("team-b", {}), ("team-a", TRAINING_POD), 29500)
        assert admits(policies, ("elsewhere", {}), (RELEASE_NS, TRAINER), 10443)


@pytest.mark.slow
def test_no_teams_no_isolation_policies(chart_ready):
    docs = docs_of(helm_template("--set", "monitoring.enabled=true").stdout)
    policies = _policies(docs)
    assert {p["metadata"]["name"] for p in policies} == {"trainstack-trainer-metrics", "trainstack-jobset-metrics"}
    assert admits(policies, ("elsewhere", {}), (RELEASE_NS, TRAINER), 10443)


@pytest.mark.slow
def test_tracked_namespaces_that_are_not_teams_stay_open(chart_ready):
    """Isolation is the teams': a namespace only `tracking.namespaces` names gets no policy (its TrainJobs keep
    every peer), while the tracking server admits every tracked namespace, teams included."""
    policies = _policies(_render("--set", "tracking.enabled=true", "--set", "tracking.namespaces[0]=research"))
    assert not [p for p in policies if p["metadata"]["namespace"] == "research"]
    tracking = next(p for p in policies if p["metadata"]["name"] == "trainstack-tracking")
    server = (RELEASE_NS, tracking["spec"]["podSelector"]["matchLabels"])
    port = 5000  # tracking.port's default
    assert tracking["spec"]["ingress"][0]["ports"] == [{"port": "http", "protocol": "TCP"}]
    named = [dict(p) for p in policies]
    for p in named:  # the evaluator takes numbers: the server's `http` port is tracking.port
        for rule in p["spec"].get("ingress") or []:
            for pt in rule.get("ports") or []:
                if pt.get("port") == "http":
                    pt["port"] = port
    for ns in ("team-a", "team-b", "research"):
        assert admits(named, (ns, {}), server, port), ns
    assert not admits(named, ("elsewhere", {}), server, port)
