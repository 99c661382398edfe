"""Teams: what the chart renders per team (namespace, quota, roles, Kueue objects), the one-line
errors of bad team values, and `trainstack team add` editing a values file in place."""

from __future__ import annotations

from conftest import assert_one_line_error, run_cli
from support.team_values import VALUES


def test_team_add_refuses_an_existing_or_reserved_team(values_file):
    for name, message in (("existing", "teams.existing already exists"), ("kueue", "'kueue' is reserved")):
        result = run_cli("team", "add", name, "--values", str(values_file), "--members", "carol")
        assert_one_line_error(result, message)
    assert values_file.read_text() == VALUES


def test_member_syntax():
    from trainstack.teams import parse_members

    assert parse_members(["alice,group:ml", "sa:ci/runner", "user:bob"], "view") == [
        {"kind": "User", "name": "alice", "role": "view"},
        {"kind": "Group", "name": "ml", "role": "view"},
        {"kind": "ServiceAccount", "namespace": "ci", "name": "runner", "role": "view"},
        {"kind": "User", "name": "bob", "role": "view"}]


# -- on a real API server (the local control plane): RBAC, Kueue objects, the queue label ---------


def test_the_nodes_kueue_assigned_read_from_both_forms_of_a_topology_assignment():
    """Kueue v1beta2 writes a PodSet's topologyAssignment compressed: one node for a slice (`universal`) or
    a node per domain (`individual`, with a common prefix), pods per domain the same or each its own."""
    from trainstack.e2e.teams_live import topology_assignment

    level = "kubernetes.io/hostname"
    workload = {"status": {"admission": {"podSetAssignments": [
        {"name": "node", "topologyAssignment": {"levels": [level], "slices": [
            {"domainCount": 1, "valuesPerLevel": [{"universal": "gpu-1"}], "podCounts": {"universal": 2}}]}},
        {"name": "launcher", "topologyAssignment": {"levels": ["rack", level], "slices": [
            {"domainCount": 2, "valuesPerLevel": [{"universal": "r1"}, {"individual": {"prefix": "cpu-", "roots": ["0", "1"]}}],
             "podCounts": {"individual": [1, 3]}}]}}]}}}
    assert topology_assignment(workload) == ["gpu-1", "gpu-1", "cpu-0", "cpu-1", "cpu-1", "cpu-1"]
    assert topology_assignment(None) == [] and topology_assignment({"status": {}}) == []
