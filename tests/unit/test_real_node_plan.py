"""The real node's plan, without a cluster: placement patches, the mirror values, pools, images."""

from __future__ import annotations

from trainstack import images
from trainstack.cluster import node as nodemod
from trainstack.cluster.local import NodePool
from trainstack.e2e import suite as suitemod
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
    job = suitemod.SmokeJob("torch-gpu", GPU_RUNTIME, node_selector={"type": "kwok"},
                            tolerations=[{"key": "trainstack.io/simulated", "operator": "Exists"}])
    patch = job.manifest("ns")["spec"]["runtimePatches"][0]
    assert patch["manager"] == "trainstack.io/e2e"
    pod = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true", "type": "kwok"}
    assert [t["key"] for t in pod["tolerations"]] == ["nvidia.com/gpu", "trainstack.io/simulated"]


def test_a_job_without_placement_has_no_patch():
    assert "runtimePatches" not in suitemod.SmokeJob("torch-gpu", GPU_RUNTIME).manifest("ns")["spec"]


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
            assert entry["entrypoint"] == ["/manager"] and entry["user"] == "65532:65532"


def test_trainjob_names_from_runtime_names_are_dns_labels():
    assert suitemod.job_name("torchtune-qwen2.5-1.5b") == "torchtune-qwen2-5-1-5b"
    assert suitemod.job_name("torch-distributed-gpu") == "torch-gpu"


def test_static_volumes_are_a_default_class_with_retained_hostpath_pvs(tmp_path):
    objs = nodemod.static_volumes(tmp_path, count=3)
    sc, pvs = objs[0], objs[1:]
    assert sc["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"] == "true"
    assert len(pvs) == 3 and all(pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain" for pv in pvs)
    assert all((tmp_path / "volumes" / f"pv-{i}").is_dir() for i in range(3))
