"""Teams live: two teams from values, their members' access, and Kueue quotas on the local cluster.

One cluster for the module (e2e/teams_live.py): the chart installed with helm, the teams example and
`kueue.install`; Trainer, JobSet and Kueue v0.19.2 (the lock's) as the chart's Deployments on a real
node, the GPU pool on KWOK nodes tainted like GPU nodes. What a user relies on: a member of team-a
works in team-a (kubectl and the Kubeflow SDK) and not in team-b, cannot change the platform; the
golden runtimes pass upstream's webhook; Kueue runs team-a's GPU TrainJobs within its quota, lets it
borrow up to its limit and no further, and the pods it admits keep the runtime's tolerations and
land on the tainted GPU pool.
"""

from __future__ import annotations

import subprocess

import pytest
import yaml

from trainstack import helm, paths
from trainstack.cluster.local import BINARIES, POOL_LABEL
from trainstack.e2e import suite as suitemod
from trainstack.e2e import teams_live as tl
from trainstack.e2e.providers.local import REAL_NODE_TOOLS, controller_binaries
from trainstack.teams import access_matrix, golden_runtimes_pass_webhook

from .conftest import fresh_run_dir, installed, need_binaries

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def teams_platform():
    # a cluster of its own: the teams values and Kueue installed, then `helm upgrade` (the release changes)
    need_binaries(*BINARIES, "helm", *REAL_NODE_TOOLS, "kueue-controller")
    provider = tl.TeamsProvider(fresh_run_dir("teams-live"))
    need_binaries(*controller_binaries(suitemod.render("dev", provider.lock, extra=provider.values_files()),
                                       provider.lock))
    with installed(provider) as suite:
        yield suite


def gpu_runtime(suite):
    return next(r for r in suitemod.golden_runtimes(suite.rendered) if r["metadata"]["name"] == tl.GPU_RUNTIME)


def test_kueue_runs_as_the_charts_deployment_with_the_trainjob_integration(teams_platform):
    kube = teams_platform.kube
    deploy = kube.kubectl_json("get", "deployment", "kueue-controller-manager", "-n", suitemod.NAMESPACE)
    assert deploy["status"].get("availableReplicas") == 1
    image = deploy["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image.endswith(f"/kueue/kueue:{teams_platform.lock.image('kueue-controller').tag}")
    config = kube.kubectl_json("get", "configmap", "kueue-manager-config", "-n", suitemod.NAMESPACE)
    assert "trainer.kubeflow.org/trainjob" in config["data"]["controller_manager_config.yaml"]
    # the queues of both teams, created after Kueue (a post-install hook on the first install)
    queues = kube.kubectl_json("get", "clusterqueues.kueue.x-k8s.io")["items"]
    assert {q["metadata"]["name"]: q["spec"]["cohortName"] for q in queues} == {"team-a": "trainstack",
                                                                                "team-b": "trainstack"}
    for queue in queues:
        assert tl.conditions(queue).get("Active") == "True", queue.get("status")


def test_members_access_matrix_on_the_installed_platform(teams_platform):
    kubeconfig = teams_platform.provider.kubeconfig
    for user, groups in (("alice@example.com", ()), ("dana@example.com", ("team-a",))):  # admin; edit by group
        rows = access_matrix(kubeconfig, user, "team-a", "team-b", "team-a", groups=groups)
        assert len(rows) > 30
        bad = [r.as_dict() for r in rows if not r.ok]
        assert bad == [], bad


def test_golden_runtimes_pass_upstreams_webhook(teams_platform):
    rows = golden_runtimes_pass_webhook(teams_platform.provider.kubeconfig,
                                        suitemod.golden_runtimes(teams_platform.rendered))
    assert len(rows) == len(suitemod.golden_runtimes(teams_platform.rendered))
    bad = [r.as_dict() for r in rows if not r.ok]
    assert bad == [], bad


def test_kueue_quota_one_gpu_job_at_a_time_borrowing_up_to_the_limit(teams_platform):
    kube = teams_platform.kube
    runtime = gpu_runtime(teams_platform)

    def admitted_and_running(ns, name, pods):
        st = tl.state(kube, ns, name)
        return st if st["admitted"] and not st["suspended"] and st["running_pods"] == pods else None

    running_pods = {}  # the pods of each admitted team-a job, as they ran

    def record(name):
        running_pods[name] = tl.pods(kube, "team-a", name)

    def waiting(ns, name):
        st = tl.state(kube, ns, name)
        return st if st["workload"] and st["pending_reason"] else None

    # team-b busy on both its GPUs, team-a on its one: nothing left to borrow in the cohort
    tl.submit(kube, tl.gpu_trainjob("b-busy", "team-b", "team-b", runtime, num_nodes=2))
    tl.submit(kube, tl.gpu_trainjob("a-first", "team-a", "team-a", runtime))
    tl.wait_until(lambda: admitted_and_running("team-b", "b-busy", 2), "b-busy admitted and running")
    tl.wait_until(lambda: admitted_and_running("team-a", "a-first", 1), "a-first admitted and running")
    record("a-first")
    tl.submit(kube, tl.gpu_trainjob("a-second", "team-a", "team-a", runtime))
    second = tl.wait_until(lambda: waiting("team-a", "a-second"), "a-second waits for quota")
    assert second["suspended"] and not second["admitted"] and second["running_pods"] == 0, second
    tl.wait_until(lambda: tl.gpu_usage(kube, "team-a") == {"total": 1, "borrowed": 0}, "team-a using 1 GPU", timeout=30)

    # the first completes: the second runs
    tl.release(kube, "team-a", "a-first")
    tl.wait_until(lambda: tl.state(kube, "team-a", "a-first")["complete"], "a-first Complete")
    tl.wait_until(lambda: admitted_and_running("team-a", "a-second", 1), "a-second admitted after a-first")
    record("a-second")

    # team-b idle: team-a borrows one GPU (its borrowingLimit) and no more, though one stays idle
    tl.release(kube, "team-b", "b-busy")
    tl.wait_until(lambda: tl.state(kube, "team-b", "b-busy")["complete"], "b-busy Complete")
    tl.wait_until(lambda: tl.gpu_usage(kube, "team-b")["total"] == 0, "team-b's GPUs free")
    tl.submit(kube, tl.gpu_trainjob("a-third", "team-a", "team-a", runtime))
    tl.wait_until(lambda: admitted_and_running("team-a", "a-third", 1), "a-third admitted on borrowed quota")
    record("a-third")
    # the ClusterQueue's usage is Kueue's status, written just after it admits: wait for it to say so
    tl.wait_until(lambda: tl.gpu_usage(kube, "team-a") == {"total": 2, "borrowed": 1}, "team-a using 2 GPUs, 1 borrowed",
                  timeout=30)
    tl.submit(kube, tl.gpu_trainjob("a-fourth", "team-a", "team-a", runtime))
    fourth = tl.wait_until(lambda: waiting("team-a", "a-fourth"), "a-fourth waits at the borrowing limit")
    assert fourth["suspended"] and fourth["running_pods"] == 0, fourth
    assert tl.gpu_usage(kube, "team-a") == {"total": 2, "borrowed": 1}
    assert tl.gpu_usage(kube, "team-b") == {"total": 0, "borrowed": 0}  # 2 GPUs nominal: one still idle

    # the pods Kueue admitted keep the runtime's tolerations and run on the tainted GPU pool
    nodes = {n["metadata"]["name"]: n for n in kube.kubectl_json("get", "nodes")["items"]}
    wanted = [t for spec in suitemod.pod_specs(runtime) for t in spec.get("tolerations") or []]
    assert wanted, "the GPU runtime tolerates the GPU taint"
    placed = 0
    for name, pods in running_pods.items():
        for pod in pods:
            node = nodes[pod["spec"]["nodeName"]]
            assert node["metadata"]["labels"].get(POOL_LABEL) == "gpu", (name, pod["spec"]["nodeName"])
            assert any(t.get("key") == tl.GPU_RESOURCE for t in node["spec"].get("taints") or [])
            for toleration in wanted:
                assert toleration in pod["spec"]["tolerations"], (name, pod["spec"]["tolerations"])
            placed += 1
    assert placed == 3


def test_helm_upgrade_adopts_the_queues_the_first_install_created(teams_platform):
    """The first install creates the Kueue objects as a post-install hook (the API did not exist when
    helm built the release); the next upgrade renders them as release objects and adopts them, in
    place: same objects, admitted workloads untouched."""
    kube = teams_platform.kube
    before = {q["metadata"]["name"]: q["metadata"]["uid"]
              for q in kube.kubectl_json("get", "clusterqueues.kueue.x-k8s.io")["items"]}
    admitted = {w["metadata"]["name"] for w in kube.kubectl_json("get", "workloads.kueue.x-k8s.io", "-A")["items"]
                if tl.conditions(w).get("Admitted") == "True"}
    # --force-conflicts: controllers own fields of chart objects (webhook certificates), docs/upgrading.md
    cmd = teams_platform.helm_cmd("upgrade", suitemod.RELEASE, str(paths.chart_dir()), "-n", suitemod.NAMESPACE,
                                  *suitemod.value_args("dev", extra=teams_platform.extra_values),
                                  "--wait", "--timeout", "180s", "--force-conflicts")
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=helm.env(teams_platform.lock),
                            check=False)
    assert result.returncode == 0, helm.first_error_line(result.stderr or result.stdout)
    manifest = subprocess.run(teams_platform.helm_cmd("get", "manifest", suitemod.RELEASE, "-n", suitemod.NAMESPACE),
                              capture_output=True, text=True, timeout=60, env=helm.env(teams_platform.lock),
                              check=True).stdout
    owned = {(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(manifest) if d}
    assert {("ClusterQueue", "team-a"), ("ClusterQueue", "team-b"), ("LocalQueue", "team-a"),
            ("ResourceFlavor", "trainstack-nvidia")} <= owned
    after = {q["metadata"]["name"]: q["metadata"]["uid"]
             for q in kube.kubectl_json("get", "clusterqueues.kueue.x-k8s.io")["items"]}
    assert after == before
    still = {w["metadata"]["name"] for w in kube.kubectl_json("get", "workloads.kueue.x-k8s.io", "-A")["items"]
             if tl.conditions(w).get("Admitted") == "True"}
    assert admitted <= still
