"""Teams: what the chart renders per team (namespace, quota, roles, Kueue objects), the one-line
errors of bad team values, and `trainstack team add` editing a values file in place."""

from __future__ import annotations

from support.cli import assert_one_line_error, run_cli
from support.team_values import VALUES


def test_team_add_refuses_an_existing_or_reserved_team(values_file):
    for name, message in (("existing", "teams.existing already exists"), ("kueue", "'kueue' is reserved")):
        result = run_cli("team", "add", name, "--values", str(values_file), "--members", "carol")
        assert_one_line_error(result, message)
    assert values_file.read_text() == VALUES


def test_team_add_blames_the_new_team_for_a_namespace_another_team_has(values_file):
    # "alpha" sorts before "existing": the chart alone would blame teams.existing
    for name in ("alpha", "zulu"):
        result = run_cli("team", "add", name, "--values", str(values_file), "--members", "carol",
                         "--namespace", "existing")
        assert_one_line_error(result, f'teams.{name}.namespace: "existing" is already the namespace of team existing')
        assert "teams.existing.namespace" not in result.stderr
    assert values_file.read_text() == VALUES


def test_team_add_refuses_a_member_it_cannot_read(values_file):
    for member in ("gruop:vision", "sa:notvalid", "sa:/runner", "sa:ci/", "group:", "user:"):
        result = run_cli("team", "add", "new", "--values", str(values_file), "--members", f"carol,{member}")
        assert result.returncode == 2, result.stderr
        assert_one_line_error(result, "--members", repr(member))
    assert values_file.read_text() == VALUES


def test_member_syntax():
    from trainstack.teams import parse_members

    assert parse_members(["alice,group:ml", "sa:ci/runner", "user:bob"], "view") == [
        {"kind": "User", "name": "alice", "role": "view"},
        {"kind": "Group", "name": "ml", "role": "view"},
        {"kind": "ServiceAccount", "namespace": "ci", "name": "runner", "role": "view"},
        {"kind": "User", "name": "bob", "role": "view"}]
    # a user name with a colon (an OIDC prefix) is written with user: before it
    assert parse_members(["user:oidc:alice"], "edit") == [{"kind": "User", "name": "oidc:alice", "role": "edit"}]


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


# What helm v4 printed when Kueue's Ready pod was not yet reachable through its webhook Service (a loaded machine),
# the URL's tail as the API server words a timeout
HOOK_FAILED = ('Error: INSTALLATION FAILED: failed post-install: warning: Hook post-install '
               'trainstack/templates/teams/kueue-clusterqueues.yaml failed: server-side apply failed for object /team-a '
               'kueue.x-k8s.io/v1beta2, Kind=ClusterQueue: Internal error occurred: failed calling webhook '
               '"mclusterqueue.kb.io": failed to call webhook: Post "https://kueue-webhook-service.kubeflow-system.svc:443'
               '/mutate-kueue-x-k8s-io-v1beta2-clusterqueue?timeout=10s": context deadline exceeded')


def test_the_suite_completes_a_first_install_with_an_upgrade_only_when_kueues_webhook_missed_the_queue_hook():
    """docs/teams.md, "The first install": the suite (as a user would) runs `helm upgrade` after an install whose
    queue hook Kueue's webhook did not answer, and after nothing else."""
    from trainstack.e2e.suite import kueue_hook_unreachable

    assert kueue_hook_unreachable("Release \"trainstack\" ...\n" + HOOK_FAILED + "\n")
    # another failed hook, or another webhook in the same hook, is not this
    assert not kueue_hook_unreachable(HOOK_FAILED.replace("teams/kueue-clusterqueues.yaml", "platform-test/pod.yaml"))
    other = HOOK_FAILED.replace("kueue-webhook-service", "jobset-webhook-service")
    assert not kueue_hook_unreachable(other)
    assert not kueue_hook_unreachable('Error: INSTALLATION FAILED: context deadline exceeded')
    # an upgrade that met the webhook again (no hook then: the queues are release objects) is tried again
    again = HOOK_FAILED.replace("failed post-install: warning: Hook post-install trainstack/templates/teams/kueue-clusterqueues.yaml "
                                "failed: ", "UPGRADE FAILED: ")
    assert not kueue_hook_unreachable(again) and kueue_hook_unreachable(again, hook=False)
