"""The golden ClusterTrainingRuntimes: what each carries, from values, for every environment."""

from __future__ import annotations

import pytest

from conftest import ROOT, helm_template, render_env
from support.cli import run_cli
from support.runtimes import by_name, docs_of_kind, rendered_runtimes
from trainstack import lock as lockmod
from trainstack import yamlio

pytestmark = pytest.mark.slow

GPU_LIMIT = "nvidia.com/gpu"
MIRROR = "mirror.example.com"
MIRROR_ARGS = ("--set", f"global.imageRegistry={MIRROR}", "--set", f"kubeflow-trainer.image.registry={MIRROR}",
               "--set", f"jobset.image.repository={MIRROR}/jobset/jobset",
               "--set", f"lws.image.manager.repository={MIRROR}/lws/lws")


def runtimes(*args: str) -> dict[str, dict]:
    return rendered_runtimes(*args)


def pods(runtime: dict):
    for job in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
        yield job["name"], job["template"]["spec"]["template"]["spec"]


def node_containers(runtime: dict):
    for _, pod in pods(runtime):
        for container in pod["containers"]:
            if container["name"] == "node":
                yield container


def accelerator(runtime: dict) -> str:
    return runtime["metadata"]["labels"]["trainstack.io/accelerator"]


# mlx-distributed-cpu's image: none is published, so turning it on means naming one (the user's copy of the
# lock's builtImages.mlx-cpu)
MLX_CPU_ARGS = ("--set", "runtimes.mlxCpu.enabled=true", "--set", "images.mlx-cpu.registry=registry.example.com",
                "--set", "images.mlx-cpu.repository=platform/mlx-cpu", "--set", "images.mlx-cpu.tag=0.30.6-bookworm")


@pytest.fixture(scope="module")
def default_runtimes(chart_ready):
    return runtimes("--set", "dataCache.enabled=true", "--set", "runtimes.torchRocm.enabled=true", *MLX_CPU_ARGS)


def test_catalog_has_every_framework_and_accelerator(default_runtimes):
    expected = {
        "torch-distributed": ("torch", "cpu"), "torch-distributed-gpu": ("torch", "nvidia"),
        "torch-distributed-rocm": ("torch", "amd"), "torch-distributed-with-cache": ("torch", "cpu"),
        "jax-distributed": ("jax", "cpu"), "jax-distributed-gpu": ("jax", "nvidia"),
        "xgboost-distributed": ("xgboost", "cpu"), "deepspeed-distributed": ("deepspeed", "nvidia"),
        "deepspeed-distributed-gpu": ("deepspeed", "nvidia"), "mlx-distributed": ("mlx", "nvidia"),
        "mlx-distributed-cpu": ("mlx", "cpu"),
        "torchtune-llama3.2-1b": ("torchtune", "nvidia"), "torchtune-llama3.2-3b": ("torchtune", "nvidia"),
        "torchtune-qwen2.5-1.5b": ("torchtune", "nvidia"),
    }
    found = {name: (rt["metadata"]["labels"]["trainer.kubeflow.org/framework"], accelerator(rt))
             for name, rt in default_runtimes.items()}
    assert found == expected


def test_gpu_runtimes_carry_gpu_limit_toleration_selector_and_shm(default_runtimes):
    for name, runtime in default_runtimes.items():
        if accelerator(runtime) != "nvidia":
            continue
        gpus = 2 if name.startswith("torchtune-") else 1  # the TorchTune runtimes keep upstream's two
        for container in node_containers(runtime):
            assert container["resources"]["limits"][GPU_LIMIT] == gpus, name
            assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"], name
        for job, pod in pods(runtime):
            assert {"key": GPU_LIMIT, "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"], name
            assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}, name
            if job.endswith("initializer"):  # downloads only: placed with the trainer, no /dev/shm
                assert "volumes" not in pod, (name, job)
                continue
            shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
            assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Gi"}


def test_cpu_runtimes_request_no_gpu_and_match_limits_to_requests(default_runtimes):
    for name, runtime in default_runtimes.items():
        if accelerator(runtime) != "cpu":
            continue
        for container in node_containers(runtime):
            resources = container["resources"]
            assert not any("gpu" in key for key in {**resources.get("limits", {}), **resources.get("requests", {})})
            assert resources["limits"]["cpu"] == resources["requests"]["cpu"], name
            assert {"name": "OMP_NUM_THREADS", "value": "1"} in container["env"], name
        for _, pod in pods(runtime):  # no GPU taint tolerated, no pool chosen: only the lost-node tolerations
            assert {t["key"] for t in pod.get("tolerations", [])} <= {"node.kubernetes.io/not-ready",
                                                                      "node.kubernetes.io/unreachable"}, name
            assert "nodeSelector" not in pod, name


def test_gpu_values_reach_every_gpu_runtime(chart_ready):
    found = runtimes("--set", "runtimes.nvidia.gpusPerNode=8", "--set", "runtimes.nvidia.runtimeClassName=nvidia",
                     "--set", "runtimes.nvidia.nodeSelector.pool=a100", "--set", "runtimes.nvidia.shm.sizeLimit=64Gi")
    for mpi in ("deepspeed-distributed", "mlx-distributed"):
        assert found[mpi]["spec"]["mlPolicy"]["mpi"]["numProcPerNode"] == 8  # one MPI rank per GPU
    for name in ("torch-distributed-gpu", "jax-distributed-gpu", "deepspeed-distributed", "mlx-distributed"):
        for container in node_containers(found[name]):
            assert container["resources"]["limits"][GPU_LIMIT] == 8
        for _, pod in pods(found[name]):
            assert pod["runtimeClassName"] == "nvidia"
            assert pod["nodeSelector"]["pool"] == "a100"
            assert next(v for v in pod["volumes"] if v["name"] == "dshm")["emptyDir"]["sizeLimit"] == "64Gi"
    assert "runtimeClassName" not in dict(pods(found["torch-distributed"]))["node"]


def test_per_runtime_override_reaches_only_that_runtime(chart_ready):
    found = runtimes("--set", "runtimes.torch.resources.requests.cpu=8", "--set", "runtimes.torch.resources.limits.cpu=8",
                     "--set", "runtimes.torch.numNodes=4", "--set", "runtimes.torch.priorityClassName=batch-low",
                     "--set", "runtimes.jax.queueName=team-a")
    torch = found["torch-distributed"]
    assert torch["spec"]["mlPolicy"]["numNodes"] == 4
    assert next(node_containers(torch))["resources"]["requests"]["cpu"] in (8, "8")
    assert dict(pods(torch))["node"]["priorityClassName"] == "batch-low"
    assert next(node_containers(found["xgboost-distributed"]))["resources"]["requests"]["cpu"] == "2"
    assert found["jax-distributed"]["spec"]["template"]["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "team-a"}
    assert "metadata" not in found["torch-distributed"]["spec"]["template"]


def test_turning_a_runtime_off_removes_it(chart_ready):
    found = runtimes("--set", "runtimes.jaxGpu.enabled=false", "--set", "runtimes.xgboost.enabled=false")
    assert "jax-distributed-gpu" not in found and "xgboost-distributed" not in found
    assert "jax-distributed" in found


def test_cache_runtime_only_with_data_cache(chart_ready, default_runtimes):
    assert "torch-distributed-with-cache" not in runtimes()
    cache = default_runtimes["torch-distributed-with-cache"]
    initializer = dict(pods(cache))["dataset-initializer"]
    assert initializer["serviceAccountName"] == "kubeflow-trainer-cache-initializer"


def test_output_volume_existing_claim_and_per_job(chart_ready):
    shared = runtimes("--set", "runtimes.defaults.output.enabled=true", "--set", "runtimes.defaults.output.existingClaim=models")
    pod = dict(pods(shared["torch-distributed"]))["node"]
    assert {"name": "output", "persistentVolumeClaim": {"claimName": "models"}} in pod["volumes"]
    assert {"name": "output", "mountPath": "/workspace/output"} in next(node_containers(shared["torch-distributed"]))["volumeMounts"]
    per_job = runtimes("--set", "runtimes.defaults.output.enabled=true")["torch-distributed"]
    policy = per_job["spec"]["template"]["spec"]["volumeClaimPolicies"][0]
    assert policy["retentionPolicy"] == {"whenDeleted": "Retain"}
    assert policy["templates"][0]["metadata"]["name"] == "output"
    assert "volumes" not in dict(pods(per_job))["node"]


PODGROUP_APIS = {"native": "scheduling.k8s.io/v1alpha2/PodGroup", "coscheduling": "scheduling.x-k8s.io/v1alpha1/PodGroup",
                 "volcano": "scheduling.volcano.sh/v1beta1/PodGroup"}


def test_gang_scheduling_choice_sets_the_runtimes_pod_group_policy_and_pull_secrets(chart_ready):
    """coscheduling and volcano give every golden runtime their podGroupPolicy; native and none give none
    (the Job controller makes native PodGroups; Trainer's coscheduling would need another scheduler)."""
    expected = {"coscheduling": {"coscheduling": {"scheduleTimeoutSeconds": 90}}, "volcano": {"volcano": {}},
                "native": None, "none": None}
    for gang, policy in expected.items():
        api = ("--api-versions", PODGROUP_APIS[gang]) if gang in PODGROUP_APIS else ()
        found = runtimes("--set", f"scheduling.gang={gang}", "--set", "scheduling.scheduleTimeoutSeconds=90",
                         "--set", "global.imagePullSecrets[0].name=regcred", *api)
        for name, runtime in found.items():
            assert runtime["spec"].get("podGroupPolicy") == policy, (gang, name)
            for _, pod in pods(runtime):
                assert pod["imagePullSecrets"] == [{"name": "regcred"}]


@pytest.mark.parametrize("gang", sorted(PODGROUP_APIS))
def test_chart_refuses_a_gang_choice_whose_podgroup_api_the_cluster_does_not_serve(chart_ready, gang):
    """Without the PodGroup API (a cluster without the gates or the scheduler) the render fails with one
    line naming the value and the missing API; with the API passed (as a live cluster reports it) it renders."""
    refused = helm_template("--set", f"scheduling.gang={gang}", check=False)
    assert refused.returncode != 0
    errors = [ln for ln in refused.stderr.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1, refused.stderr
    assert f"scheduling.gang={gang}: the cluster does not serve {PODGROUP_APIS[gang]}" in errors[0], errors[0]
    assert helm_template("--set", f"scheduling.gang={gang}", "--api-versions", PODGROUP_APIS[gang]).returncode == 0


@pytest.mark.parametrize("release", lockmod.load().kubernetes_matrix())
def test_native_gang_is_refused_on_every_tested_release_but_1_36(chart_ready, release):
    """docs/support.md's feature table: 1.37 replaced the Job controller's inference with an opt-in field and
    1.35 and older have no WorkloadWithJob, so native means 1.36 only; on the others the render is one line
    naming the release, even with the PodGroup API served."""
    result = helm_template("--set", "scheduling.gang=native", "--api-versions", PODGROUP_APIS["native"],
                           "--kube-version", release, check=False)
    if release.startswith("v1.36."):
        assert result.returncode == 0, result.stderr
        return
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("Error:")]
    assert result.returncode != 0 and len(errors) == 1, result.stderr
    assert "scheduling.gang=native" in errors[0] and release.lstrip("v") in errors[0], errors[0]


def test_an_unknown_gang_choice_is_refused_by_the_schema(chart_ready):
    bad = helm_template("--set", "scheduling.gang=kai", check=False)
    assert bad.returncode != 0 and "/scheduling/gang" in bad.stderr


def test_restricted_security_on_every_pod_and_container(default_runtimes):
    for name, runtime in default_runtimes.items():
        for _, pod in pods(runtime):
            assert pod["securityContext"]["runAsNonRoot"] is True
            assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
            for container in pod["containers"]:
                assert container["securityContext"]["allowPrivilegeEscalation"] is False, name
                assert container["securityContext"]["capabilities"]["drop"] == ["ALL"], name


def test_every_image_comes_from_the_lock_through_the_mirror(chart_ready, lock):
    locked = {f"{i.repository}:{i.tag}" for i in lock.images()}
    found = runtimes("--set", "dataCache.enabled=true", "--set", "runtimes.torchRocm.enabled=true", *MIRROR_ARGS)
    seen = set()
    for runtime in found.values():
        for _, pod in pods(runtime):
            for container in pod["containers"]:
                image = container["image"]
                assert image.startswith(MIRROR + "/"), image
                assert image[len(MIRROR) + 1:] in locked, image
                seen.add(image)
                for env in container.get("env", []):
                    if env["name"] == "CACHE_IMAGE":
                        assert env["value"].startswith(MIRROR + "/")
    assert len(seen) >= 6


def test_sdk_default_name_must_exist(chart_ready):
    result = helm_template("--set", "runtimes.torch.enabled=false", check=False)
    assert result.returncode != 0 and "torch-distributed" in result.stderr
    renamed = runtimes("--set", "runtimes.torch.name=torch-distributed-cpu", "--set", "runtimes.torchGpu.name=torch-distributed")
    assert accelerator(renamed["torch-distributed"]) == "nvidia"
    clash = helm_template("--set", "runtimes.torchGpu.name=torch-distributed", check=False)
    assert clash.returncode != 0 and "must be unique" in clash.stderr


@pytest.mark.parametrize("env", sorted(p.parent.name for p in (ROOT / "overlays").glob("*/kustomization.yaml")
                                       if p.parent.name not in ("base", "argocd")))
def test_sdk_default_runtime_resolves_in_every_environment(chart_ready, env):
    result = render_env(env)
    assert result.returncode == 0, result.stderr
    found = by_name(docs_of_kind(result.stdout, "ClusterTrainingRuntime"))
    assert found["torch-distributed"]["metadata"]["labels"]["trainer.kubeflow.org/framework"] == "torch"


def test_runtimes_are_plain_objects_not_hooks(dev_render):
    for runtime in docs_of_kind(dev_render, "ClusterTrainingRuntime"):
        assert not any(k.startswith("helm.sh/hook") for k in runtime["metadata"].get("annotations", {}))


def test_every_golden_runtime_has_an_example_trainjob(default_runtimes):
    names = {n for n, rt in default_runtimes.items() if "trainstack.io/alias-of" not in rt["metadata"]["labels"]}
    used = {yamlio.load(p.read_text())["spec"]["runtimeRef"]["name"]
            for p in (ROOT / "examples" / "trainjobs").glob("*.yaml")}
    assert used == names


def test_readme_table_lists_what_the_chart_renders(default_runtimes):
    """The generated runtime table of docs/runtimes.md (chartdocs, Python) and the chart (Helm) apply the same naming rule."""
    from trainstack import chartdocs

    catalog = chartdocs.runtime_catalog()
    assert {e["name"] for e in catalog} == set(default_runtimes)  # everything on: torchRocm, MLX on CPU, the cache
    assert {e["name"] for e in catalog if e["enabled"]} == set(runtimes("--set", "dataCache.enabled=true"))
    for entry in catalog:
        labels = default_runtimes[entry["name"]]["metadata"]["labels"]
        assert (labels["trainstack.io/accelerator"], labels["trainstack.io/runtime"]) == (entry["class"], entry["key"])


def test_example_trainjobs_pass_prod_validation_and_policies(chart_ready):
    import json

    prod = {d["metadata"]["name"] for d in docs_of_kind(render_env("prod").stdout, "ClusterTrainingRuntime")}
    files = [str(p) for p in sorted((ROOT / "examples" / "trainjobs").glob("*.yaml"))
             if yamlio.load(p.read_text())["spec"]["runtimeRef"]["name"] in prod]
    assert len(files) >= 6
    result = run_cli("validate", "--env", "prod", "--policies", "--output", "json", *files)
    report = json.loads(result.stdout)
    assert result.returncode == 0, [f for f in report["findings"] if f["severity"] == "error"][:3]


def test_an_unknown_image_reference_fails_the_render_naming_file_container_and_key(chart_ready):
    """`@key` in a container's image or an env value must name a key under `images`; before, a
    missing env key rendered `%!s(<nil>)/…` and helm exited 0."""
    env = helm_template("--set", "dataCache.enabled=true", "--set", "images.data-cache=null", check=False)
    assert env.returncode != 0
    assert ('runtimes/torch-distributed-with-cache.yaml: container dataset-initializer, env CACHE_IMAGE uses image '
            'key "@data-cache", which is not under images in values') in env.stderr, env.stderr
    image = helm_template("--set", "images.torch=null", check=False)
    assert image.returncode != 0
    assert 'container node uses image key "@torch", which is not under images in values' in image.stderr, image.stderr
    assert "%!s(<nil>)" not in env.stdout + image.stdout


def test_cpu_jobs_spread_their_node_pods_over_nodes_and_gpu_jobs_do_not(default_runtimes):
    """A CPU job's `node` pods prefer one node each (its own pods only: matchLabelKeys on the JobSet's name),
    and still run when there are fewer nodes; GPU pods are placed by their GPU request alone."""
    for name, runtime in default_runtimes.items():
        for job, pod in pods(runtime):
            spread = pod.get("topologySpreadConstraints")
            is_node = any(c["name"] == "node" for c in pod["containers"])
            if accelerator(runtime) == "cpu" and is_node:
                assert spread == [{
                    "labelSelector": {"matchExpressions": [{"key": "jobset.sigs.k8s.io/replicatedjob-name",
                                                            "operator": "Exists"}]},
                    "matchLabelKeys": ["jobset.sigs.k8s.io/jobset-name"], "maxSkew": 1,
                    "nodeTaintsPolicy": "Honor", "topologyKey": "kubernetes.io/hostname",
                    "whenUnsatisfiable": "ScheduleAnyway"}], (name, job)
            else:
                assert spread is None, (name, job, spread)


def test_required_spread_and_spread_off(chart_ready):
    found = runtimes("--set", "runtimes.torch.spread=required", "--set", "runtimes.jax.spread=none")
    (torch_spread,) = dict(pods(found["torch-distributed"]))["node"]["topologySpreadConstraints"]
    assert torch_spread["whenUnsatisfiable"] == "DoNotSchedule"
    assert "topologySpreadConstraints" not in dict(pods(found["jax-distributed"]))["node"]
    bad = helm_template("--set", "runtimes.cpu.spread=always", check=False)
    assert bad.returncode != 0 and "spread" in bad.stderr


def test_every_pod_is_evicted_soon_after_its_node_is_lost(default_runtimes, chart_ready):
    """Each pod tolerates a NotReady or unreachable node for `nodeLostSeconds` (30), not Kubernetes' 300 s;
    null leaves the cluster's default."""
    lost = {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}
    for name, runtime in default_runtimes.items():
        for job, pod in pods(runtime):
            found = {t["key"]: t for t in pod.get("tolerations") or [] if t["key"] in lost}
            assert set(found) == lost, (name, job)
            assert all(t == {"key": t["key"], "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}
                       for t in found.values()), (name, job, found)
    plain = runtimes("--set", "runtimes.defaults.nodeLostSeconds=null")["torch-distributed"]
    assert not [t for t in dict(pods(plain))["node"].get("tolerations") or [] if t["key"] in lost]


def test_the_controllers_leave_a_lost_node_as_fast_as_the_training_pods(chart_ready):
    """The Trainer and JobSet webhooks admit every TrainJob and training pod: on a lost node their pods are
    evicted after 30 s too, not Kubernetes' 300 s (the node-loss e2e: tests/e2e/test_node_loss.py)."""
    docs = docs_of_kind(helm_template().stdout, "Deployment")
    lost = [{"key": f"node.kubernetes.io/{t}", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}
            for t in ("not-ready", "unreachable")]
    for name in ("kubeflow-trainer-controller-manager", "jobset-controller"):
        pod = next(d for d in docs if d["metadata"]["name"] == name)["spec"]["template"]["spec"]
        assert pod.get("tolerations") == lost, (name, pod.get("tolerations"))


def test_mlx_on_cpu_is_off_until_its_image_is_named_then_an_mpi_runtime_on_cpu_nodes(chart_ready, default_runtimes):
    """Upstream publishes no CPU MLX image: mlx-distributed-cpu is off by default, turning it on without an image
    fails the render naming the key to fill, and with one it is the MPI runtime on the CPU class (the image on the
    launcher and the node pods, no GPU, one rank per node)."""
    assert "mlx-distributed-cpu" not in runtimes()
    missing = helm_template("--set", "runtimes.mlxCpu.enabled=true", check=False)
    assert missing.returncode != 0
    assert ('runtimes/mlx-distributed.yaml: container node uses image key "@mlx-cpu", which is not under images in '
            'values') in missing.stderr, missing.stderr
    runtime = default_runtimes["mlx-distributed-cpu"]
    assert runtime["spec"]["mlPolicy"]["mpi"]["sshAuthMountPath"] == "/home/mpiuser/.ssh"
    assert [job for job, _ in pods(runtime)] == ["node", "launcher"]
    for container in node_containers(runtime):
        assert container["image"] == "registry.example.com/platform/mlx-cpu:0.30.6-bookworm"
        assert GPU_LIMIT not in container["resources"].get("limits", {})
