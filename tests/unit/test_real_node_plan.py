"""The real node's plan, without a cluster: placement patches, the mirror values, pools, images."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from trainstack import images
from trainstack.cluster import addons
from trainstack.cluster import node as nodemod
from trainstack.cluster.local import NodePool
from trainstack.e2e import smokejobs as smokemod
from trainstack.e2e.providers import local as localprov

GPU_RUNTIME = {
    "kind": "ClusterTrainingRuntime",
    "metadata": {"name": "torch-distributed-gpu"},
    "spec": {"mlPolicy": {"torch": {}}, "template": {"spec": {"replicatedJobs": [{
        "name": "node",
        "template": {"spec": {"template": {"spec": {
            "nodeSelector": {"nvidia.com/gpu.present": "true"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "node", "image": "localhost:5000/pytorch/pytorch:x",
                            "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}}}]}}},
}


def test_simulated_job_patch_keeps_the_runtimes_own_tolerations_and_selector():
    job = smokemod.SmokeJob("torch-gpu", GPU_RUNTIME, node_selector={"type": "kwok"},
                            tolerations=[{"key": "trainstack.io/simulated", "operator": "Exists"}])
    patch = job.manifest("ns")["spec"]["runtimePatches"][0]
    assert patch["manager"] == "trainstack.io/e2e"
    pod = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true", "type": "kwok"}
    assert [t["key"] for t in pod["tolerations"]] == ["nvidia.com/gpu", "trainstack.io/simulated"]


def test_pod_annotations_reach_every_pod_and_leave_the_runtimes_placement_alone():
    """`bench scale --run-seconds`: the KWOK run time on every replicated job's pods, nothing else patched."""
    job = smokemod.SmokeJob("torch-gpu", GPU_RUNTIME, pod_annotations={"pod-complete.stage.kwok.x-k8s.io/delay": "120s"})
    replicated = job.manifest("ns")["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert replicated == [{"name": "node", "template": {"spec": {"template": {
        "metadata": {"annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "120s"}}, "spec": {}}}}}]


def test_a_job_without_placement_has_no_patch():
    assert "runtimePatches" not in smokemod.SmokeJob("torch-gpu", GPU_RUNTIME).manifest("ns")["spec"]


def test_kwok_pools_beside_a_real_node_are_tainted_and_absent_with_real_only():
    pools = [NodePool("cpu"), NodePool("gpu", taints=({"key": "nvidia.com/gpu", "value": "present",
                                                       "effect": "NoSchedule"},))]
    both = localprov.simulated_pools(pools, "both")
    assert both[0].taints == (localprov.SIMULATED_TAINT,)
    assert [t["key"] for t in both[1].taints] == ["nvidia.com/gpu"]
    assert localprov.simulated_pools(pools, "real") == []
    assert localprov.simulated_pools(pools, "kwok") == pools


def test_upstream_images_keep_the_locks_repository_and_tag(lock):
    for name in images.names(lock):
        entry = images.spec(name, lock)
        if entry.get("image"):
            upstream = lock.image(entry["image"])
            assert images.reference(name, lock) == f"{nodemod.MIRROR}/{upstream.repository}:{upstream.tag}"
            if entry.get("binary"):  # a controller: upstream's entrypoint and user
                assert entry["entrypoint"] == ["/manager"] and entry["user"] == "65532:65532"


def test_trainjob_names_from_runtime_names_are_dns_labels():
    assert smokemod.job_name("torchtune-qwen2.5-1.5b") == "torchtune-qwen2-5-1-5b"
    assert smokemod.job_name("torch-distributed-gpu") == "torch-gpu"


def test_static_volumes_are_a_default_class_with_retained_hostpath_pvs(tmp_path):
    objs = addons.static_volumes(tmp_path, count=3)
    sc, pvs = objs[0], objs[1:]
    assert sc["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"] == "true"
    assert len(pvs) == 3 and all(pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain" for pv in pvs)
    assert all((tmp_path / "volumes" / f"pv-{i}").is_dir() for i in range(3))


def test_every_real_node_has_its_own_address_pod_subnet_and_a_route_to_every_other():
    from trainstack.cluster import sandbox

    count = 3
    addresses = [sandbox.node_ip(i) for i in range(count)]
    subnets = [nodemod.pod_subnet(i) for i in range(count)]
    assert addresses[0] == sandbox.NODE_IP  # real-0 shares the control plane's namespace and address
    assert len(set(addresses)) == len(set(subnets)) == count
    assert all(ipaddress.ip_network(s).subnet_of(ipaddress.ip_network(nodemod.CLUSTER_POD_CIDR)) for s in subnets)
    for i in range(count):
        routes = nodemod.pod_routes(i, count)
        # every other node's pods through that node's address; never its own subnet
        assert routes == {subnets[j]: addresses[j] for j in range(count) if j != i}
    assert nodemod.pod_routes(0, 1) == {}


def test_further_nodes_reach_the_api_server_by_an_address_its_certificate_names(lock, tmp_path):
    from trainstack.cluster.controlplane import kwokctl_config

    binaries = {name: tmp_path / name for name in ("kwokctl", "kwok", "etcd", "kube-apiserver",
                                                   "kube-controller-manager", "kube-scheduler", "kubectl")}
    ports = dict.fromkeys(("etcd", "etcd-peer", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
                           "kwok-controller"), 1)
    config = kwokctl_config(lock, binaries, tmp_path, ports, (), True, tmp_path, ())[0]
    assert nodemod.NODE_IP in config["options"]["kubeApiserverCertSANs"]
    # a lost real node is NotReady after Kubernetes' own 50 s, not kwokctl's 3m20s for fake nodes
    manager = next(p for p in config["componentsPatches"] if p["name"] == "kube-controller-manager")
    args = {a["key"]: a["value"] for a in manager["extraArgs"]}
    assert args["node-monitor-grace-period"] == "50s" and args["node-monitor-period"] == "5s"


def test_real_nodes_takes_one_to_eight(tmp_path):
    from support.cli import run_cli

    for bad in ("0", "9", "two"):
        result = run_cli("e2e", "--real-nodes", bad, "--provider", "local")
        assert result.returncode == 2, result
        assert "--real-nodes takes" in result.stderr and "Traceback" not in result.stderr


def test_the_memory_sampler_keeps_the_peak_of_the_sum_and_its_parts():
    import os

    from trainstack.e2e.memory import MemorySampler, rss_bytes

    class Box:
        def __init__(self, pids):
            self.pids = pids

        def processes(self):
            return self.pids

    me = rss_bytes(os.getpid())
    assert me > 1024 * 1024
    sampler = MemorySampler({"a": Box([os.getpid()]), "b": Box([])})
    sampler.sample()
    sampler.sandboxes["b"] = Box([os.getpid()])
    sampler.sample()
    sampler.sandboxes["a"] = Box([])
    sampler.sample()  # lower than the peak: the peak and its parts stay
    report = sampler.report()
    assert report["samples"] == 3 and set(report["peak_rss_mib_by_part"]) == {"a", "b"}
    assert report["peak_rss_mib_by_part"]["a"] > 0 and report["peak_rss_mib_by_part"]["b"] > 0
    assert rss_bytes(2**22 + 7) == 0  # a pid that is gone counts nothing


def test_a_node_directory_too_deep_for_its_sockets_is_one_clear_error(tmp_path, lock):
    from trainstack.cluster import sandbox as sandboxmod
    from trainstack.errors import UserError

    def node(depth: int) -> nodemod.RealNode:
        work = tmp_path.joinpath(*["d" * 9] * depth)
        return nodemod.RealNode(sandboxmod.Sandbox(name="t", workdir=work), tmp_path, api_port=1, cache=tmp_path,
                                lock=lock)

    nodemod.RealNode(sandboxmod.Sandbox(name="t", workdir=Path("/tmp/s")), tmp_path, api_port=1, cache=tmp_path,
                     lock=lock).check_socket_paths()  # a short path passes
    deep = node(12)
    try:
        deep.check_socket_paths()
    except UserError as err:
        assert "node real-0" in err.message and "kubelet/device-plugins/kubelet.sock" in err.message
        assert "TRAINSTACK_CACHE" in err.hint
    else:
        raise AssertionError("a 150-character socket path was accepted")
    assert not (deep.dir / "containerd").exists()  # refused before anything is written


def test_without_the_kubeflow_sdk_the_real_node_steps_say_how_to_install_it(monkeypatch, tmp_path):
    import sys

    import pytest

    from trainstack.e2e import realnode
    from trainstack.errors import UserError

    monkeypatch.setitem(sys.modules, "kubeflow", None)  # an import of kubeflow.* now fails as if not installed
    monkeypatch.delitem(sys.modules, "kubeflow.common.types", raising=False)
    monkeypatch.delitem(sys.modules, "kubeflow.trainer", raising=False)
    with pytest.raises(UserError, match="trainstack smoke install"):
        realnode.client(tmp_path / "kubeconfig")


def test_a_killed_worker_whose_trainjob_failed_names_what_each_pod_ended_as(monkeypatch):
    from types import SimpleNamespace

    from trainstack.e2e import realnode

    ended = {"name": "t1", "state": "Failed", "message": "FailedJobs: jobset failed", "killed": "t1-node-0-1-x",
             "seconds_to_end": 215.3,
             "pods": [{"pod": "t1-node-0-0-a", "phase": "Failed", "exit_code": 1},
                      {"pod": "t1-node-0-1-b", "phase": "Failed", "exit_code": 137}]}
    monkeypatch.setattr(realnode, "worker_killed", lambda *a, **k: ended)
    steps = SimpleNamespace(kube=None, provider=SimpleNamespace(kubeconfig="k", job_timeout=300),
                            real_node_count=lambda: 2)
    outcome = realnode.RealNodeSteps.worker_killed(steps)
    assert outcome.data["pods"][1]["exit_code"] == 137
    assert "t1-node-0-0-a Failed exit 1, t1-node-0-1-b Failed exit 137" in outcome.detail
