"""`trainstack bench scale --quick` end to end (100 TrainJobs, then the same workloads as raw JobSets
and raw Jobs, on 10 fake GPU nodes): the results file has the keys the benchmark promises, every
workload of every path completed (none lost under load), and the picture is written. Plus the
pieces it relies on, without a cluster: the controllers' metrics on 127.0.0.1 and the workload mix."""

from __future__ import annotations

from trainstack.benchmarks import scale_workloads as scale
from trainstack.e2e.hostcontrollers import HostController


def test_host_controllers_serve_metrics_on_loopback(tmp_path):
    ctl = HostController(deployment="jobset-controller", namespace="kubeflow-system", binary_name="jobset-controller",
                         service_account="sa", selector={}, pod_labels={}, extra_args=[], workdir=tmp_path,
                         config={"apiVersion": "config.jobset.x-k8s.io/v1alpha1", "kind": "Configuration"},
                         webhook_port=30001, health_port=30002, metrics_port=30003)
    assert ctl.host_config()["metrics"]["bindAddress"] == "127.0.0.1:30003"
    assert ctl.metrics_url == "https://127.0.0.1:30003/metrics"


def test_workload_mix_is_fixed_by_the_seed_and_in_bounds():
    available = [name for name, _ in scale.MIX]
    first, again = scale.workloads(300, available), scale.workloads(300, available)
    assert first == again
    assert {w.runtime for w in first} == set(available)
    assert {w.num_nodes for w in first} == set(range(1, scale.MAX_NODES_PER_JOB + 1))
    assert scale.workloads(300, available, seed=1) != first


def test_raw_jobs_keep_the_jobset_pod_template_and_count():
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
              "metadata": {"name": "w00001", "namespace": "a", "ownerReferences": [{"kind": "TrainJob"}]},
              "spec": {"replicatedJobs": [{"name": "node", "replicas": 2, "template": {"spec": {
                  "parallelism": 3, "completions": 3, "template": {"metadata": {"labels": {
                      "jobset.sigs.k8s.io/jobset-name": "w00001", "app": "x"}},
                      "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}}}]}}
    assert scale.expected_pods(jobset) == 6
    raw = scale.raw_jobset(jobset, "b")
    assert raw["metadata"] == {"name": "w00001", "namespace": "b", "labels": {scale.SCALE_LABEL: "w00001"}}
    jobs = scale.raw_jobs(jobset, "c")
    assert [j["metadata"]["name"] for j in jobs] == ["w00001-node-0", "w00001-node-1"]
    assert jobs[0]["spec"]["template"]["metadata"]["labels"] == {"app": "x", scale.SCALE_LABEL: "w00001"}
    assert sum(j["spec"]["parallelism"] for j in jobs) == scale.expected_pods(jobset)


def test_partially_placed_jobs_are_counted_by_how_far_apart_their_binds_were():
    """A gang's pods bind together (its calls spread under SPREAD_S: never partial); a job whose pods bind
    seconds apart is partial in between, counted as `held` (the goal's figure) over HELD_S; one that never
    gets all its pods is partial to the end; every multi-pod job lands in one bucket of the histogram."""
    from trainstack.benchmarks.scale_gang import partial_placement
    from trainstack.benchmarks.scale_watch import Tracker

    tracker = Tracker(["gang", "slow-calls", "waited", "stuck", "single"])
    recs = tracker.records
    recs["gang"].expected, recs["gang"].pod_bound = 3, {"a": 10.0, "b": 10.01, "c": 10.02}
    recs["slow-calls"].expected, recs["slow-calls"].pod_bound = 2, {"a": 11.0, "b": 13.0}
    recs["waited"].expected, recs["waited"].pod_bound = 2, {"a": 2.0, "b": 40.0}
    recs["stuck"].expected, recs["stuck"].pod_bound = 4, {"a": 12.0}
    recs["single"].expected, recs["single"].pod_bound = 1, {"a": 1.0}
    found = partial_placement(tracker, end=200.0)
    assert {k: v for k, v in found.items() if "held" in k} == {
        "max_held": 2, "jobs_ever_held": 2, "longest_held_s": 188.0}
    assert {k: v for k, v in found.items() if "partially" in k} == {
        "max_partially_placed": 3, "jobs_ever_partially_placed": 3, "longest_partially_placed_s": 188.0}
    assert found["spread_histogram"] == {"<=1s": 1, "1-5s": 1, "5-30s": 0, "30-120s": 1, ">120s": 1}


def test_the_gang_comparison_picture_is_drawn_from_the_recorded_figures(tmp_path):
    """`--gpu-scheduling` draws bench/results/scale-gang.png from what it records: the picture of the
    recorded run is drawn again from scale.json alone."""
    import json

    from conftest import ROOT
    from trainstack.benchmarks.scale_report import plot_gang

    recorded = json.loads((ROOT / "bench" / "results" / "scale.json").read_text())["gpu_scheduling"]
    assert recorded["plot"] == "scale-gang.png" and (ROOT / "bench" / "results" / recorded["plot"]).is_file()
    out = tmp_path / "gang.png"
    plot_gang(recorded, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
