"""Guard rails: what the chart ships per environment, and offline verdicts equal to the examples'."""

from __future__ import annotations

import atexit
import functools
import json
import shutil
import tempfile
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, by_kind, docs_of, helm_template, rendered_file
from support.cli import run_cli
from support.policy_examples import examples
from trainstack import paths, yamlio

pytestmark = pytest.mark.slow

def _bindings(docs):
    return {b["metadata"]["labels"]["trainstack.io/rule"]: b for b in by_kind(docs, "ValidatingAdmissionPolicyBinding").values()}


def test_dev_warns_except_image_tag_which_denies(dev_render):
    bindings = _bindings(docs_of(dev_render))
    assert bindings["imageTag"]["spec"]["validationActions"] == ["Deny"]
    for rule in ("trainjobRuntime", "jobSize", "gpuRuntime", "restrictedSecurity"):
        assert bindings[rule]["spec"]["validationActions"] == ["Warn", "Audit"], rule
    assert "imageRegistry" not in bindings and "requiredLabels" not in bindings


def test_turning_a_rule_off_removes_policy_and_binding(chart_ready):
    docs = docs_of(helm_template("--set", "policies.rules.jobSize.enabled=false").stdout)
    assert "trainstack-job-size" not in by_kind(docs, "ValidatingAdmissionPolicy")
    assert "jobSize" not in _bindings(docs)
    none = docs_of(helm_template("--set", "policies.enabled=false").stdout)
    assert by_kind(none, "ValidatingAdmissionPolicy") == {}


def test_params_live_in_one_configmap_that_every_binding_references(chart_ready):
    docs = docs_of(helm_template("--set", "policies.params.maxNodes=4", "--set", "runtimes.jaxGpu.enabled=false",
                                 "--set", "policies.rules.imageRegistry.enabled=true").stdout)
    params = by_kind(docs, "ConfigMap")["trainstack-policy-params"]["data"]
    assert params["maxNodes"] == "4"
    assert "jax-distributed-gpu" not in params["runtimes"].split(",")
    assert set(params["gpuRuntimes"].split(",")) == {
        "torch-distributed-gpu", "deepspeed-distributed", "deepspeed-distributed-gpu", "mlx-distributed",
        "torchtune-llama3.2-1b", "torchtune-llama3.2-3b", "torchtune-qwen2.5-1.5b"}
    assert set(params["allowedRegistries"].split(",")) >= {"docker.io", "ghcr.io", "nvcr.io", "registry.k8s.io"}
    policies = by_kind(docs, "ValidatingAdmissionPolicy")
    for binding in _bindings(docs).values():
        policy = policies[binding["spec"]["policyName"]]
        if "paramKind" in policy["spec"]:
            assert binding["spec"]["paramRef"]["name"] == "trainstack-policy-params"


def test_policies_are_shipped_as_written_in_policies_folder(dev_render):

    shipped = by_kind(docs_of(dev_render), "ValidatingAdmissionPolicy")
    sources = {p.name: yamlio.load(p.read_text()) for p in paths.policies_dir(ROOT).glob("*.yaml")}
    compared = 0
    for name, source in sources.items():
        if source["metadata"]["name"] in shipped:  # dev leaves imageRegistry and requiredLabels off
            assert shipped[source["metadata"]["name"]]["spec"] == source["spec"], name
            compared += 1
    assert compared == len(sources) - 2


@functools.cache
def _example_verdicts() -> tuple[dict[str, list[dict]], int]:
    """Every policy example judged offline by one `trainstack validate` run against the prod render (each
    example in a file of its own): their policy findings by example id, and validate's exit code."""
    folder = Path(tempfile.mkdtemp(prefix="trainstack-policy-examples-"))
    atexit.register(shutil.rmtree, folder, True)
    files = {}
    for n, example in enumerate(examples()):
        path = folder / f"{n:03d}.yaml"
        path.write_text(yaml.safe_dump(example.obj, sort_keys=False))
        files[str(path)] = example.id
    result = run_cli("validate", str(rendered_file("prod")), *files, "--policies", "--output", "json")
    verdicts: dict[str, list[dict]] = {example_id: [] for example_id in files.values()}
    for finding in json.loads(result.stdout)["findings"]:
        if finding["file"] in files and finding["rule"].startswith("policy"):
            verdicts[files[finding["file"]]].append(finding)
    return verdicts, result.returncode


@pytest.mark.parametrize("example", examples(), ids=lambda e: e.id)
def test_offline_verdict_matches_example(chart_ready, example):
    verdicts, code = _example_verdicts()
    assert code in (0, 1), code  # 1: some examples are meant to be denied; anything else is validate failing
    denials = [f for f in verdicts[example.id] if f["severity"] == "error"]
    if example.expect == "allowed":
        assert denials == [], denials
    else:
        assert denials, f"{example.id}: no policy denial offline"
        assert any(example.message in f["message"] for f in denials), denials


def test_prod_passes_its_own_policies(chart_ready):
    result = run_cli("validate", "--env", "prod", "--policies", "--output", "json")
    report = json.loads(result.stdout)
    assert result.returncode == 0, [f for f in report["findings"] if f["severity"] == "error"][:5]
    assert report["summary"]["errors"] == 0


def test_offline_judges_the_pods_trainer_merges_not_the_patch_alone(chart_ready, tmp_path):
    """A patch that adds a container by a new name passes every CEL rule (the patch is clean), but the
    merged pod has a container without the restricted securityContext: validate denies it offline;
    in the cluster Pod Security restricted on the team namespace refuses the pod (docs/guardrails.md)."""
    import copy

    base = next(e for e in examples() if e.obj["metadata"]["name"] == "patch-keeps-drop-all").obj
    obj = copy.deepcopy(base)
    obj["metadata"]["name"] = "sidecar-patch"
    pod = obj["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod["containers"] = [{"name": "sidecar", "env": [{"name": "MODE", "value": "debug"}]}]
    files = {}
    for name, doc in (("allowed", base), ("merged", obj)):
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(doc))
        files[name] = str(path)
    result = run_cli("validate", str(rendered_file("prod")), *files.values(), "--policies", "--output", "json")
    findings = json.loads(result.stdout)["findings"]
    verdicts = {name: [f for f in findings if f["file"] == path and f["severity"] == "error"]
                for name, path in files.items()}
    assert verdicts["allowed"] == []
    assert any("spec.runtimePatches merged as Trainer merges them" in f["message"] and
               "allowPrivilegeEscalation: false" in f["message"] for f in verdicts["merged"]), verdicts["merged"]


def test_placement_params_follow_the_pools_teams_and_priority_classes(chart_ready):

    docs = [d for d in yamlio.load_all(rendered_file("prod").read_text()) if d]
    params = by_kind(docs, "ConfigMap")["trainstack-policy-params"]["data"]
    runtime = by_kind(docs, "ClusterTrainingRuntime")["torch-distributed-gpu"]  # the GPU pool, as the GPU runtimes select it
    pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert params["gpuPoolLabels"].split(",") == sorted(pod["nodeSelector"])
    # the pool's taints: what the runtime tolerates, less the lost-node tolerations every pod has (nodeLostSeconds)
    assert params["gpuPoolTaints"].split(",") == sorted(t["key"] for t in pod["tolerations"]
                                                        if not t["key"].startswith("node.kubernetes.io/"))
    assert params["team.team-a.gpus"] == "true" and params["team.team-b.gpus"] == "false"  # quota with and without GPUs
    assert "node-role.kubernetes.io/control-plane" in params["controlPlaneLabels"].split(",")
    assert params["priorityClasses"] == "" and params["imageEnvVars"] == "CACHE_IMAGE,FLUX_VIEW_IMAGE"
    listed = by_kind(docs_of(helm_template("--set", "policies.params.priorityClasses={batch-low}",
                                           "--set", "runtimes.defaults.priorityClassName=training").stdout), "ConfigMap")
    assert listed["trainstack-policy-params"]["data"]["priorityClasses"] == "batch-low,training"


def test_device_variables_are_one_param_and_an_empty_list_turns_their_denial_off(chart_ready, tmp_path):
    """deniedEnvVars reaches the params ConfigMap as one list; emptied there, the rule lets
    NVIDIA_VISIBLE_DEVICES through offline (the list is the rule's whole input, nothing hard-coded)."""
    docs = [d for d in yamlio.load_all(rendered_file("prod").read_text()) if d]
    params = by_kind(docs, "ConfigMap")["trainstack-policy-params"]["data"]
    denied = set(params["deniedEnvVars"].split(","))
    assert {"NVIDIA_VISIBLE_DEVICES", "AMD_VISIBLE_DEVICES", "NVIDIA_IMEX_CHANNELS"} <= denied
    assert not {"CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"} & denied
    job = next(e for e in examples() if e.obj["metadata"]["name"] == "all-gpus-of-the-node")
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job.obj, sort_keys=False))
    params["deniedEnvVars"] = ""
    (tmp_path / "emptied.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))
    verdicts = {}
    for name, render in (("default", rendered_file("prod")), ("emptied", tmp_path / "emptied.yaml")):
        result = run_cli("validate", str(render), str(tmp_path / "job.yaml"), "--policies", "--output", "json")
        verdicts[name] = [f for f in json.loads(result.stdout)["findings"]
                          if f["file"] == str(tmp_path / "job.yaml") and f["severity"] == "error"]
    assert any(job.message in f["message"] for f in verdicts["default"]), verdicts["default"]
    assert verdicts["emptied"] == [], verdicts["emptied"]
