"""Trainer's strategic merge of runtimePatches, offline (validate/merge.py): the semantics a pod gets."""

from __future__ import annotations

from trainstack.validate import merge

RUNTIME = {"mlPolicy": {"numNodes": 1}, "template": {"spec": {"replicatedJobs": [
    {"name": "init", "template": {"spec": {"template": {"spec": {"containers": [{"name": "fetch", "image": "a:1"}]}}}}},
    {"name": "node", "template": {"spec": {"template": {"spec": {
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        "nodeSelector": {"pool": "gpu"},
        "containers": [{"name": "node", "image": "b:1", "env": [{"name": "A", "value": "1"}],
                        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}]}}}}}]}}}


def _patch(pod: dict) -> dict:
    return {"runtimePatches": [{"manager": "m", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"spec": pod}}}}]}}}}]}


def _node_pod(spec: dict) -> dict:
    jobs = spec["template"]["spec"]["replicatedJobs"]
    assert [j["name"] for j in jobs] == ["init", "node"]  # the runtime's order is kept
    return jobs[1]["template"]["spec"]["template"]["spec"]


def test_lists_without_a_merge_key_are_replaced():
    pod = _node_pod(merge.merged_runtime_spec(RUNTIME, _patch({"containers": [
        {"name": "node", "securityContext": {"capabilities": {"drop": ["NET_RAW"]}}}],
        "tolerations": [{"key": "other", "operator": "Exists"}]})))
    node = pod["containers"][0]
    assert node["securityContext"]["capabilities"]["drop"] == ["NET_RAW"]
    assert node["securityContext"]["allowPrivilegeEscalation"] is False  # maps merge
    assert node["image"] == "b:1"
    assert pod["tolerations"] == [{"key": "other", "operator": "Exists"}]


def test_lists_with_a_merge_key_merge_by_key_and_append_new_items():
    pod = _node_pod(merge.merged_runtime_spec(RUNTIME, _patch({
        "nodeSelector": {"zone": "a"},
        "containers": [{"name": "node", "env": [{"name": "A", "value": "2"}, {"name": "B", "value": "3"}]},
                       {"name": "sidecar", "env": [{"name": "C", "value": "4"}]}]})))
    assert pod["nodeSelector"] == {"pool": "gpu", "zone": "a"}
    assert [c["name"] for c in pod["containers"]] == ["node", "sidecar"]
    assert pod["containers"][0]["env"] == [{"name": "A", "value": "2"}, {"name": "B", "value": "3"}]
    assert "securityContext" not in pod["containers"][1]  # a new container brings only what the patch gives


def test_the_runtime_is_not_changed_and_patches_apply_in_order():
    before = repr(RUNTIME)
    spec = {"runtimePatches": _patch({"nodeSelector": {"pool": "one"}})["runtimePatches"] +
            _patch({"nodeSelector": {"pool": "two"}})["runtimePatches"]}
    assert _node_pod(merge.merged_runtime_spec(RUNTIME, spec))["nodeSelector"] == {"pool": "two"}
    assert repr(RUNTIME) == before
