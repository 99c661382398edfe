"""Parity with upstream: every runtime upstream's chart ships at the pinned version exists here,
under upstream's name, running what upstream's runs; and upstream's own example TrainJobs that
use those runtimes pass `trainstack validate --env dev --policies`.

Upstream's side is never a hand-kept list: trainstack.upstream renders upstream's chart from the
Trainer module zip the lock pins (checksum-verified) with the pinned helm.
"""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from conftest import ROOT, helm_template
from support.cli import run_cli
from support.runtimes import by_name, docs_of_kind, policy_params, rendered_runtimes
from trainstack import paths, upstream, yamlio
from trainstack.jsontypes import dig

pytestmark = pytest.mark.slow

ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
SUFFIX = {"cpu": "cpu", "nvidia": "gpu", "amd": "rocm"}
EVERYTHING = ("--set", "dataCache.enabled=true", "--set", "runtimes.torchRocm.enabled=true")


@pytest.fixture(scope="module")
def theirs(chart_ready, lock) -> dict[str, dict]:
    found = upstream.runtimes(lock)
    assert len(found) >= 9, sorted(found)  # v2.3.0 ships nine; fewer means the reading broke
    return found


@pytest.fixture(scope="module")
def ours(chart_ready) -> dict[str, dict]:
    return rendered_runtimes(*EVERYTHING)


@pytest.fixture(scope="module")
def ours_by_default(chart_ready) -> dict[str, dict]:
    """What the chart ships with default values (the data cache runtime needs the cache on)."""
    return rendered_runtimes("--set", "dataCache.enabled=true")


def image_ref(image: str | None) -> tuple[str, str]:
    """(registry/repository, tag) with Docker's implicit docker.io and library/ spelled out."""
    if not image:
        return "", ""
    name = image.partition("@")[0]
    repo, tag = name.rsplit(":", 1) if ":" in name.rsplit("/", 1)[-1] else (name, "")
    parts = repo.split("/")
    if "." not in parts[0] and ":" not in parts[0] and parts[0] != "localhost":
        parts = ["docker.io", *(parts if len(parts) > 1 else ["library", *parts])]
    return "/".join(parts), tag


def pods(runtime: dict):
    for job in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
        yield job, job["template"]["spec"]["template"]["spec"]


def essence(runtime: dict) -> dict:
    """What a runtime runs, without what trainstack adds to make it golden: framework, ML policy
    (node and rank counts come from values), JobSet network and success policy, and per job its
    name, replicas, dependencies, step, service account and, per container, name, image
    repository, command, args and readiness probe."""
    spec = runtime["spec"]
    ml = copy.deepcopy(spec["mlPolicy"])
    ml.pop("numNodes", None)
    if "mpi" in ml:
        ml["mpi"].pop("numProcPerNode", None)  # one rank per GPU: from runtimes.<class>.gpusPerNode
    template = spec["template"]["spec"]
    jobs = []
    for job, pod in pods(runtime):
        jobs.append({
            "name": job["name"], "replicas": job.get("replicas", 1), "dependsOn": job.get("dependsOn"),
            "step": dig(job["template"], "metadata", "labels", ANCESTOR),
            "serviceAccountName": pod.get("serviceAccountName"),
            "containers": [{"name": c["name"], "image": image_ref(c.get("image"))[0], "command": c.get("command"),
                            "args": c.get("args"), "readinessProbe": c.get("readinessProbe")}
                           for c in pod["containers"]],
        })
    return {"framework": runtime["metadata"]["labels"]["trainer.kubeflow.org/framework"], "mlPolicy": ml,
            "network": template.get("network"), "successPolicy": template.get("successPolicy"), "jobs": jobs}


def test_every_upstream_runtime_ships_under_upstreams_name(theirs, ours_by_default):
    missing = sorted(set(theirs) - set(ours_by_default))
    assert missing == [], f"upstream's chart ships {missing}, trainstack (default values) does not"


def test_each_runtime_runs_what_upstreams_runs(theirs, ours):
    for name in sorted(theirs):
        assert name in ours, name
        compare(name, ours[name], theirs[name])


def compare(name: str, mine: dict, up: dict) -> None:
    assert essence(mine) == essence(up), name
    mine_pods = {job["name"]: pod for job, pod in pods(mine)}
    for job, pod in pods(up):
        for container in pod["containers"]:
            golden = next(c for c in mine_pods[job["name"]]["containers"] if c["name"] == container["name"])
            where = f"{name}/{job['name']}/{container['name']}"
            # upstream's pinned tag is ours (a lock bump that forgets upstream's image shows here)
            up_repo, up_tag = image_ref(container.get("image"))
            if up_tag:
                assert image_ref(golden["image"]) == (up_repo, up_tag), where
            # upstream's environment, mounts and resource limits, all kept (image values by repository)
            env = {e["name"]: e for e in golden.get("env", [])}
            for var in container.get("env", []):
                assert var["name"] in env, (where, var["name"])
                if var["name"].endswith("_IMAGE"):
                    assert image_ref(env[var["name"]]["value"])[0] == image_ref(var["value"])[0], where
                else:
                    assert env[var["name"]] == var, where
            mounts = {(m["name"], m["mountPath"]) for m in golden.get("volumeMounts", [])}
            assert {(m["name"], m["mountPath"]) for m in container.get("volumeMounts", [])} <= mounts, where
            for resource, amount in (dig(container, "resources", "limits") or {}).items():
                assert golden["resources"]["limits"][resource] == amount, (where, resource)
            # upstream's user and group hold, set on the container or the pod
            for key in ("runAsUser", "runAsGroup"):
                if key in (container.get("securityContext") or {}):
                    effective = dig(golden, "securityContext", key,
                                    default=mine_pods[job["name"]]["securityContext"].get(key))
                    assert effective == container["securityContext"][key], (where, key)
            if "fsGroup" in (pod.get("securityContext") or {}):
                assert mine_pods[job["name"]]["securityContext"]["fsGroup"] == pod["securityContext"]["fsGroup"], where
    # upstream's per-job volumes (the TorchTune initializer PVC), with upstream's size and modes by default
    claims = {t["metadata"]["name"]: t["spec"] for p in mine["spec"]["template"]["spec"].get("volumeClaimPolicies", [])
              for t in p["templates"]}
    for policy in up["spec"]["template"]["spec"].get("volumeClaimPolicies", []):
        for claim in policy["templates"]:
            assert claims[claim["metadata"]["name"]] == claim["spec"], name


def test_names_follow_the_one_rule(theirs, ours):
    """Every runtime is upstream's name, a variant <upstream>-<suffix of its class> of the same
    skeleton, or an alias of one of those; each skeleton is one upstream runtime."""
    for name, runtime in ours.items():
        labels = runtime["metadata"]["labels"]
        source, cls = labels["trainstack.io/upstream-runtime"], labels["trainstack.io/accelerator"]
        assert source in theirs, f"{name}: its skeleton {source} is not a runtime upstream ships"
        if "trainstack.io/alias-of" in labels:
            target = labels["trainstack.io/alias-of"]
            assert target in ours and ours[target]["spec"] == runtime["spec"], name
        else:
            assert name in (source, f"{source}-{SUFFIX[cls]}"), name
    skeletons = {yamlio.load(p.read_text())["metadata"]["name"]: p.stem for p in paths.runtimes_dir(ROOT).glob("*.yaml")}
    assert set(skeletons) == set(theirs) and all(k == v for k, v in skeletons.items())


def test_the_released_deepspeed_name_is_an_alias(ours, chart_ready):
    alias = ours["deepspeed-distributed-gpu"]
    assert alias["metadata"]["labels"]["trainstack.io/alias-of"] == "deepspeed-distributed"
    assert alias["spec"] == ours["deepspeed-distributed"]["spec"]
    dropped = rendered_runtimes("--set", "runtimes.deepspeed.aliases=null")
    assert "deepspeed-distributed-gpu" not in dropped and "deepspeed-distributed" in dropped
    clash = helm_template("--set", "runtimes.deepspeed.aliases={torch-distributed}", check=False)
    assert clash.returncode != 0 and "runtimes.deepspeed.aliases" in clash.stderr and "must be unique" in clash.stderr


def test_torchtune_runtimes_cannot_be_renamed(chart_ready):
    """The Trainer controller derives the model (llama3_2/1B) from the runtime's name."""
    result = helm_template("--set", "runtimes.torchtuneLlama3_2_1b.name=llama-ft", check=False)
    assert result.returncode != 0
    assert "runtimes.torchtuneLlama3_2_1b.name" in result.stderr and "torchtune-llama3.2-1b" in result.stderr


def test_a_class_switch_removes_every_runtime_of_that_class(chart_ready, ours):
    found = rendered_runtimes("--set", "runtimes.nvidia.enabled=false")
    nvidia = {n for n, rt in ours.items() if rt["metadata"]["labels"]["trainstack.io/accelerator"] == "nvidia"}
    assert {"deepspeed-distributed", "mlx-distributed", "torchtune-qwen2.5-1.5b", "torch-distributed-gpu"} <= nvidia
    assert not nvidia & set(found) and "torch-distributed" in found
    assert policy_params("--set", "runtimes.nvidia.enabled=false")["gpuRuntimes"] == ""


def test_mlx_has_its_own_switch(chart_ready, ours):
    assert ours["mlx-distributed"]["metadata"]["labels"]["trainstack.io/accelerator"] == "nvidia"
    found = rendered_runtimes("--set", "runtimes.mlx.enabled=false")
    assert "mlx-distributed" not in found and "deepspeed-distributed" in found


def test_policy_allow_lists_are_the_catalog(chart_ready, ours_by_default):
    params = policy_params("--set", "dataCache.enabled=true")
    assert set(params["runtimes"].split(",")) == set(ours_by_default)
    gpu = {n for n, rt in ours_by_default.items() if rt["metadata"]["labels"]["trainstack.io/accelerator"] != "cpu"}
    assert set(params["gpuRuntimes"].split(",")) == gpu


def test_torchtune_initializer_storage_from_values(chart_ready):
    found = rendered_runtimes(
        "--set", "runtimes.defaults.initializerStorage.size=80Gi", "--set", "runtimes.defaults.initializerStorage.storageClassName=fast",
        "--set", "runtimes.torchtuneLlama3_2_3b.initializerStorage.accessModes={ReadWriteMany}",
        "--set", "runtimes.defaults.output.enabled=true")
    for name in ("torchtune-llama3.2-1b", "torchtune-llama3.2-3b", "torchtune-qwen2.5-1.5b"):
        policies = found[name]["spec"]["template"]["spec"]["volumeClaimPolicies"]
        claims = {t["metadata"]["name"]: t["spec"] for p in policies for t in p["templates"]}
        assert set(claims) == {"initializer", "output"}, name  # the output volume joins, never replaces
        assert claims["initializer"]["resources"]["requests"]["storage"] == "80Gi"
        assert claims["initializer"]["storageClassName"] == "fast"
        modes = ["ReadWriteMany"] if name == "torchtune-llama3.2-3b" else ["ReadWriteOnce"]
        assert claims["initializer"]["accessModes"] == modes, name
        for job, pod in pods(found[name]):
            volumes = {v["name"] for v in pod.get("volumes", [])}
            # the initializers only mount the initializer PVC; /dev/shm and output are the trainer's
            assert ("dshm" in volumes) == (job["name"] == "node"), (name, job["name"])


def test_torchtune_gpu_settings_come_from_the_nvidia_class(chart_ready):
    found = rendered_runtimes("--set", "runtimes.nvidia.nodeSelector.pool=h100",
                              "--set", "runtimes.torchtuneQwen2_5_1_5b.gpusPerNode=4")
    qwen = found["torchtune-qwen2.5-1.5b"]
    node = next(c for job, pod in pods(qwen) if job["name"] == "node" for c in pod["containers"])
    assert node["resources"]["limits"]["nvidia.com/gpu"] == 4
    assert next(c for job, pod in pods(found["torchtune-llama3.2-1b"]) if job["name"] == "node"
                for c in pod["containers"])["resources"]["limits"]["nvidia.com/gpu"] == 2  # upstream's default
    for _, pod in pods(qwen):
        assert pod["nodeSelector"]["pool"] == "h100"
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]


def _shipped_trainjobs(shipped: set[str]) -> tuple[list[upstream.Example], list[tuple[upstream.Example, str]]]:
    """Upstream's example TrainJobs split into those on a runtime trainstack ships and the others (why)."""
    checked, skipped = [], []
    for example in upstream.examples():
        if example.kind != "TrainJob":
            continue
        ref = example.doc["spec"]["runtimeRef"]
        kind = ref.get("kind", "ClusterTrainingRuntime")
        if kind == "ClusterTrainingRuntime" and ref["name"] in shipped:
            checked.append(example)
        else:
            skipped.append((example, f"uses the {kind} {ref['name']} the example defines itself"))
    return checked, skipped


def test_upstream_example_trainjobs_on_shipped_runtimes_pass_dev(tmp_path, dev_render):
    shipped = set(by_name(docs_of_kind(dev_render, "ClusterTrainingRuntime")))
    checked, skipped = _shipped_trainjobs(shipped)
    assert len(checked) >= 3, [e.path for e in checked]  # v2.3.0: 01-multi-node, 02-runtime-patches, 03-kueue
    for example, why in skipped:  # the others define their own runtime: trainstack cannot ship those
        assert any(d.name == example.doc["spec"]["runtimeRef"]["name"] for d in upstream.examples()
                   if d.path == example.path and d.kind != "TrainJob"), why
    files = []
    for example in checked:
        target = tmp_path / f"{example.name}.yaml"
        target.write_text(yaml.safe_dump(example.doc))
        files.append(str(target))
    result = run_cli("validate", "--env", "dev", "--policies", "--output", "json", *files)
    findings = [f for f in json.loads(result.stdout)["findings"] if str(tmp_path) in f.get("file", "")]
    assert result.returncode == 0 and findings == [], findings
