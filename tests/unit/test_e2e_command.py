"""`trainstack e2e` without a cluster: arguments, errors, and the pure parts (node pools, configs, env)."""

from __future__ import annotations

import copy

import pytest

from conftest import ROOT
from support.cli import assert_one_line_error, run_cli
from trainstack import yamlio
from trainstack.cluster.local import FAIL_LABEL, GPU_RESOURCE, NodePool, default_pools
from trainstack.e2e import smokejobs as smokemod
from trainstack.e2e.hostcontrollers import HostController
from trainstack.e2e.providers.local import pools_for

GPU_RUNTIME = {
    "kind": "ClusterTrainingRuntime",
    "metadata": {"name": "torch-distributed-gpu"},
    "spec": {
        "mlPolicy": {"numNodes": 1, "torch": {}},
        "template": {
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "node",
                        "template": {
                            "spec": {
                                "template": {
                                    "spec": {
                                        "nodeSelector": {"accelerator": "nvidia-h100"},
                                        "tolerations": [
                                            {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
                                        ],
                                        "containers": [
                                            {
                                                "name": "node",
                                                "image": "pytorch/pytorch:x",
                                                "resources": {"limits": {GPU_RESOURCE: 8}},
                                            }
                                        ],
                                    }
                                }
                            }
                        },
                    }
                ]
            }
        },
    },
}
CPU_RUNTIME = {
    "kind": "ClusterTrainingRuntime",
    "metadata": {"name": "xgboost-distributed"},
    "spec": {
        "mlPolicy": {"xgboost": {}},
        "template": {
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "node",
                        "template": {
                            "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "x:1"}]}}}
                        },
                    }
                ]
            }
        },
    },
}


def test_install_flag_is_only_for_existing():
    result = run_cli("e2e", "--provider", "local", "--install")
    assert_one_line_error(result, "--install is only for --provider existing")
    assert result.returncode == 2


def test_unknown_provider_is_a_usage_error():
    result = run_cli("e2e", "--provider", "minikube")
    assert_one_line_error(result, "invalid choice: 'minikube'")
    assert result.returncode == 2


def test_down_with_nothing_kept(tmp_path):
    # the first `down` also removes what a run that died on this host left (its sandboxes are host-wide,
    # whatever the cache): after it, nothing is left to stop
    first = run_cli("e2e", "down", env={"TRAINSTACK_CACHE": str(tmp_path)})
    assert first.returncode == 0, first.stderr
    result = run_cli("e2e", "down", env={"TRAINSTACK_CACHE": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert "nothing to stop" in result.stderr


def test_a_missing_binary_is_one_clear_line_and_nothing_starts(tmp_path):
    result = run_cli("e2e", "--provider", "local", env={"TRAINSTACK_CACHE": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: render the chart: helm v") and "is not installed" in last, last
    assert "trainstack tools install helm" in last
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "e2e" / "state").exists() or not any((tmp_path / "e2e" / "state").iterdir())


def test_gpu_pool_follows_what_the_gpu_runtimes_select_and_tolerate():
    pools = {p.name: p for p in pools_for([GPU_RUNTIME, CPU_RUNTIME])}
    assert set(pools) == {"cpu", "gpu"}
    gpu = pools["gpu"]
    assert gpu.labels == {"accelerator": "nvidia-h100"}
    assert gpu.taints == ({"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"},)
    node = gpu.nodes()[0]
    assert node["status"]["capacity"][GPU_RESOURCE] == "8"
    assert node["metadata"]["labels"]["accelerator"] == "nvidia-h100"
    assert pools["cpu"].taints == () and GPU_RESOURCE not in pools["cpu"].nodes()[0]["status"]["capacity"]


def test_an_amd_runtime_gets_its_own_pool():
    amd = {**GPU_RUNTIME, "metadata": {"name": "torch-distributed-rocm"}}
    amd = copy.deepcopy(amd)
    container = amd["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    container["containers"][0]["resources"] = {"limits": {"amd.com/gpu": 1}}
    container["tolerations"] = [{"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    pools = {p.name: p for p in pools_for([GPU_RUNTIME, amd])}
    assert pools["amd-gpu"].extended == {"amd.com/gpu": "8"}
    assert pools["amd-gpu"].taints[0]["key"] == "amd.com/gpu"


def test_default_pools_have_the_usual_gpu_taint():
    gpu = next(p for p in default_pools() if p.extended)
    assert {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"} in gpu.taints
    assert isinstance(gpu, NodePool) and gpu.count == 2


def test_smoke_job_names_env_and_manifest():
    job = smokemod.SmokeJob(smokemod.job_name("torch-distributed-gpu"), GPU_RUNTIME)
    assert job.name == "torch-gpu"
    manifest = job.manifest("ns")
    assert manifest["spec"]["runtimeRef"] == {
        "name": "torch-distributed-gpu",
        "kind": "ClusterTrainingRuntime",
        "apiGroup": "trainer.kubeflow.org",
    }
    assert manifest["spec"]["trainer"]["numNodes"] == 2
    env = smokemod.expected_env(job)
    assert env["PET_NNODES"] == "2" and env["PET_MASTER_ADDR"] == "torch-gpu-node-0-0.torch-gpu"
    assert env["PET_MASTER_PORT"] == "29500"
    xgb = smokemod.SmokeJob("xgboost", CPU_RUNTIME)
    assert set(smokemod.expected_env(xgb)) == {
        "DMLC_TRACKER_URI",
        "DMLC_TRACKER_PORT",
        "DMLC_TASK_ID",
        "DMLC_NUM_WORKER",
    }
    assert smokemod.is_gpu(GPU_RUNTIME) and not smokemod.is_gpu(CPU_RUNTIME)


@pytest.mark.parametrize(
    "config, group_has_cert_dir",
    [
        (
            {
                "apiVersion": "config.trainer.kubeflow.org/v1alpha1",
                "kind": "Configuration",
                "webhook": {"port": 9443, "host": ""},
                "leaderElection": {"leaderElect": True, "resourceNamespace": ""},
                "certManagement": {"enable": True},
                "metrics": {"bindAddress": ":8443"},
            },
            False,
        ),
        (
            {
                "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
                "kind": "Configuration",
                "leaderElection": {"leaderElect": True},
                "internalCertManagement": {"enable": True},
            },
            True,
        ),
    ],
)
def test_host_config_replaces_only_the_in_pod_settings(tmp_path, config, group_has_cert_dir):
    ctl = HostController(
        deployment="d",
        namespace="kubeflow-system",
        binary_name="b",
        service_account="sa",
        selector={},
        pod_labels={},
        config=config,
        extra_args=[],
        workdir=tmp_path,
        webhook_port=30001,
        health_port=30002,
    )
    out = ctl.host_config()
    assert out["webhook"]["port"] == 30001 and out["webhook"]["host"] == "127.0.0.1"
    assert out["health"]["healthProbeBindAddress"] == "127.0.0.1:30002"
    assert out["metrics"]["bindAddress"] == "0"
    assert out["leaderElection"]["resourceNamespace"] == "kubeflow-system"
    cert_key = "certManagement" if not group_has_cert_dir else "internalCertManagement"
    assert out[cert_key]["enable"] is False
    assert ("certDir" in out["webhook"]) is group_has_cert_dir
    assert config.get("webhook", {}).get("port") in (None, 9443), "the chart's config is not modified"


def test_failure_label_is_upstreams_chaos_stage_label():
    assert FAIL_LABEL == "pod-container-running-failed.stage.kwok.x-k8s.io"


def test_kind_config_and_ci_workflow_take_versions_from_the_lock(lock):
    config = yamlio.load((ROOT / "e2e" / "kind-config.yaml").read_text())
    assert config["kind"] == "Cluster" and config["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    assert all("image" not in node for node in config["nodes"]), "the node image comes from the lock"
    workflow = yamlio.load((ROOT / ".github" / "workflows" / "e2e-kind.yaml").read_text())
    run_lines = [step.get("run", "") for job in workflow["jobs"].values() for step in job["steps"]]
    assert any("make e2e PROVIDER=kind" in line for line in run_lines)
    text = (ROOT / ".github" / "workflows" / "e2e-kind.yaml").read_text()
    assert lock.kind_node_image().tag not in text and "kindest/node" not in text


def test_the_test_workflow_runs_make_test_and_the_chart_tier_alone():
    """Users' CI: .github/workflows/test.yaml runs what .ci/run runs here, and the chart tier by itself."""
    workflow = yamlio.load((ROOT / ".github" / "workflows" / "test.yaml").read_text())
    runs = {name: [step.get("run", "") for step in job["steps"]] for name, job in workflow["jobs"].items()}
    assert any("make test" in line for line in runs["test"])
    assert any(line.startswith("make validate") for line in runs["chart"])
    assert not any("make setup" in line or "make test" in line for line in runs["chart"])
    makefile = (ROOT / "Makefile").read_text()
    assert "\nvalidate: setup-chart " in makefile and "\nrender: setup-chart " in makefile
    # every generated file is checked by one mechanism, in CI's chart job and in make lint (so make test)
    assert "make verify" in runs["chart"]
    assert "\t$(TS) lint\n\t$(TS) verify\n" in makefile


def test_lws_host_config_has_no_leader_election_it_cannot_place(tmp_path):
    """LWS takes its lease namespace only from the pod's files (else lws-system, where the chart grants nothing)."""
    config = {
        "apiVersion": "config.lws.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "leaderElection": {"leaderElect": True},
        "internalCertManagement": {"enable": True, "webhookServiceName": "lws-webhook-service"},
        "webhook": {"port": 9443},
    }
    ctl = HostController(
        deployment="lws-controller-manager",
        namespace="kubeflow-system",
        binary_name="lws-controller",
        service_account="lws-controller-manager",
        selector={},
        pod_labels={},
        config=config,
        extra_args=[],
        workdir=tmp_path,
        webhook_port=30003,
        health_port=30004,
    )
    out = ctl.host_config()
    assert out["leaderElection"]["leaderElect"] is False
    assert out["internalCertManagement"]["enable"] is False
    assert out["webhook"]["certDir"] == str(ctl.cert_dir) and out["webhook"]["port"] == 30003
    assert out["health"]["healthProbeBindAddress"] == "127.0.0.1:30004"
    assert config["leaderElection"]["leaderElect"] is True, "the chart's config is not modified"


def test_two_runs_started_in_the_same_second_get_their_own_folders(tmp_path, monkeypatch):
    from trainstack.e2e.command import new_run_dir

    monkeypatch.setenv("TRAINSTACK_CACHE", str(tmp_path))
    first, second = new_run_dir("20261204-090000"), new_run_dir("20261204-090000")
    assert (first.name, second.name) == ("run-20261204-090000", "run-20261204-090000-1")
    assert first.is_dir() and second.is_dir() and first.parent == second.parent == tmp_path / "e2e"
