"""The local control plane runs the native gang scheduler: the lock's feature gates on the API server,
controller manager and scheduler, its runtime config on the API server, for every cluster; the scheduler
also its own gate (SchedulerPopFromBackoffQ off: a gang that cannot be placed is not retried without pause)."""

from __future__ import annotations

import dataclasses

import pytest

from trainstack.cluster import controlplane
from trainstack.errors import UserError


def args_of(patches: list[dict], component: str) -> dict[str, str]:
    found = [p for p in patches if p["name"] == component]
    assert len(found) == 1, patches
    return {a["key"]: a["value"] for a in found[0]["extraArgs"]}


def test_lock_pins_the_1_36_gang_gates_and_the_podgroup_api(lock):
    assert lock.kubernetes_version.startswith("v1.36.")
    assert lock.kubernetes_feature_gates == {"GenericWorkload": True, "GangScheduling": True, "WorkloadWithJob": True}
    assert lock.kubernetes_runtime_config == {"scheduling.k8s.io/v1alpha2": True}
    assert lock.kubernetes_scheduler_feature_gates == {"SchedulerPopFromBackoffQ": False}


def test_gates_go_to_the_three_components_and_the_api_to_the_apiserver(lock):
    patches = controlplane.with_feature_gates([], lock)
    gates = "GenericWorkload=true,GangScheduling=true,WorkloadWithJob=true"
    for component in ("kube-apiserver", "kube-controller-manager"):  # the scheduler's gate is its alone
        assert args_of(patches, component)["feature-gates"] == gates
    assert args_of(patches, "kube-scheduler")["feature-gates"] == gates + ",SchedulerPopFromBackoffQ=false"
    assert args_of(patches, "kube-apiserver")["runtime-config"] == "scheduling.k8s.io/v1alpha2=true"
    assert "runtime-config" not in args_of(patches, "kube-scheduler")
    assert {p["name"] for p in patches} == {"kube-apiserver", "kube-controller-manager", "kube-scheduler"}


def test_gates_join_the_real_nodes_patches_without_dropping_them(lock):
    real = [{"name": "kube-apiserver", "extraArgs": [{"key": "bind-address", "value": "0.0.0.0", "override": True}]},
            {"name": "kwok-controller", "extraArgs": [{"key": "manage-all-nodes", "value": "false"}]}]
    patches = controlplane.with_feature_gates(real, lock)
    api = args_of(patches, "kube-apiserver")
    assert api["bind-address"] == "0.0.0.0" and api["feature-gates"].startswith("GenericWorkload=true")
    assert args_of(patches, "kwok-controller") == {"manage-all-nodes": "false"}
    assert "feature-gates" in args_of(patches, "kube-scheduler")
    assert real[0]["extraArgs"] == [{"key": "bind-address", "value": "0.0.0.0", "override": True}]


def test_a_malformed_gate_entry_is_one_line_naming_the_entry(lock):
    bad = dataclasses.replace(lock, data={**lock.data, "kubernetes": {**lock.data["kubernetes"],
                                                                      "featureGates": {"GangScheduling": "yes"}}})
    with pytest.raises(UserError) as err:
        controlplane.with_feature_gates([], bad)
    assert "kubernetes.featureGates" in err.value.message
    assert any("kubernetes.featureGates" in p for p in bad.problems())


def test_a_lock_without_gates_adds_no_flags(lock):
    """A cluster started with such a lock (the refusal test's) runs with the components' defaults."""
    assert controlplane.with_feature_gates([], lock.without_gates()) == []


def test_a_control_plane_upgrade_gives_the_scheduler_its_own_gates_and_the_others_none_of_them(lock):
    """`--kube-upgrade-to` restarts each component with the new release's gates: back on the pinned release
    (from an older one), the scheduler gets schedulerFeatureGates too, the API server not."""
    from trainstack.e2e import kubeupgrade

    old = ["/cache/old/kube-scheduler", "--feature-gates=SchedulerPopFromBackoffQ=true", "--secure-port=1"]
    out = kubeupgrade.upgraded_command(old, "/cache/new/kube-scheduler", "kube-scheduler", lock)
    gates = "GenericWorkload=true,GangScheduling=true,WorkloadWithJob=true,SchedulerPopFromBackoffQ=false"
    assert out[1:] == ["--secure-port=1", f"--feature-gates={gates}"], out
    api = kubeupgrade.upgraded_command(["/old/kube-apiserver"], "/new/kube-apiserver", "kube-apiserver", lock)
    assert not any("SchedulerPopFromBackoffQ" in a for a in api), api


def test_a_malformed_scheduler_gate_is_one_line_naming_the_entry(lock):
    bad = dataclasses.replace(lock, data={**lock.data, "kubernetes": {**lock.data["kubernetes"],
                                                                      "schedulerFeatureGates": {"X": "off"}}})
    assert any("kubernetes.schedulerFeatureGates" in p for p in bad.problems())


def test_the_local_scheduler_reads_a_configuration_with_kwokctls_api_limits_and_a_2s_backoff_cap(lock, tmp_path):
    """kube-scheduler ignores --kube-api-qps/--kube-api-burst once it has a file: the file carries them, and
    caps a stuck gang's backoff (docs/scheduling.md); kwokctl_config names the file write_scheduler_config
    writes."""
    from trainstack import yamlio

    ports = dict.fromkeys(controlplane.PORT_NAMES, 1)
    binaries = {name: tmp_path / name for name in controlplane.BINARIES}
    config = controlplane.kwokctl_config(lock, binaries, tmp_path, ports, (), False, tmp_path, ())[0]
    written = controlplane.write_scheduler_config(tmp_path)
    assert config["options"]["kubeSchedulerConfig"] == str(written)
    scheduler = yamlio.load(written.read_text())
    assert scheduler["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert scheduler["kind"] == "KubeSchedulerConfiguration"
    assert scheduler["clientConnection"] == {"qps": 5000, "burst": 10000}
    assert (scheduler["podInitialBackoffSeconds"], scheduler["podMaxBackoffSeconds"]) == (1, 2)


@pytest.mark.parametrize("real_node", [False, True])
def test_the_local_controller_manager_and_scheduler_run_without_leader_election(lock, tmp_path, real_node):
    """One of each, alone: no Lease renewed every 2 s, no exit when the API server is away past the renew
    deadline. The real node's own controller-manager flags stay in the same, single patch."""
    from trainstack import yamlio

    ports = dict.fromkeys(controlplane.PORT_NAMES, 1)
    binaries = {name: tmp_path / name for name in controlplane.BINARIES}
    config = controlplane.kwokctl_config(lock, binaries, tmp_path, ports, (), real_node, tmp_path, ())[0]
    manager = args_of(config["componentsPatches"], "kube-controller-manager")
    assert manager["leader-elect"] == "false"
    assert ("node-monitor-grace-period" in manager) is real_node
    scheduler = yamlio.load(controlplane.write_scheduler_config(tmp_path).read_text())
    assert scheduler["leaderElection"] == {"leaderElect": False}
