"""JAX, XGBoost and MLX TrainJobs that really train on the real nodes, submitted as an ML engineer does.

`train_framework_with_sdk` submits examples/train_jax.py on `jax-distributed`,
examples/train_xgboost.py on `xgboost-distributed` or examples/train_mlx.py on `mlx-distributed-cpu`
with two nodes through the Kubeflow SDK (`TrainerClient().train(...)` with examples/sdk_submit.py's
CustomTrainer), waits for Complete, and reads each rank's JSON events from `get_job_logs`: both
processes joined one distributed runtime (world size 2, a cross-process all-reduce), JAX's and MLX's
loss fell and both ranks hold the same weights, XGBoost's held-out score beats the trivial baseline
and both workers hold the same model. The pods ran the image built for the runtime (jax-cpu,
xgboost-cpu, mlx-cpu), Succeeded and exited 0. MLX runs over MPI (Trainer's MPI plugin): the SDK
wraps the script in `mpirun` on the launcher pod, which starts rank 0 on the node pod over ssh and
rank 1 on itself (`runLauncherAsNode`); both ranks' output is the launcher's log, and each rank
names its pod, so the two ranks are seen to run in two pods on two nodes.
`FrameworkSteps` adds these to the Suite's real-node steps (the MLX TrainJob is submitted before the steps that
precede JAX's, and the XGBoost one beside the JAX one, sharing the nodes as engineers' jobs do, each followed
by its own step), and TrainJobs that
name only a runtime (no trainer, so no command): each starts the runtime's image with its default command
and ends Complete.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .. import images, paths
from . import tracking as trackingmod
from .base import GROUP, RELEASE, SMOKE_NS, VERSION, Outcome, StepFn
from .isolation import IsolationSteps
from .jobpods import pod_facts, pods_of
from .realnode import (
    NODES,
    RealNodeFailure,
    client,
    events,
    example_module,
    wait_complete,
)
from .smokejobs import golden_runtimes


@dataclass(frozen=True)
class Framework:
    name: str
    runtime: str
    script: str  # under examples/
    image: str  # the builtImages entry the runtime's image resolves to on the real node
    args: list[str] = field(default_factory=list)
    mpi: bool = False  # mpirun on a launcher pod: every rank's output is the launcher's log (step node-0)


FRAMEWORKS = {
    "jax": Framework("jax", "jax-distributed", "train_jax.py", "jax-cpu", ["--steps", "150", "--seed", "0"]),
    "xgboost": Framework("xgboost", "xgboost-distributed", "train_xgboost.py", "xgboost-cpu",
                         ["--rounds", "30", "--seed", "0"]),
    "mlx": Framework("mlx", "mlx-distributed-cpu", "train_mlx.py", "mlx-cpu", ["--steps", "100", "--seed", "0"],
                     mpi=True),
}


def steps_of(fw: Framework) -> int:
    """How many steps (JAX) or rounds (XGBoost) FW's TrainJob trains: its --steps or --rounds argument."""
    flag = next(a for a in fw.args if a in ("--steps", "--rounds"))
    return int(fw.args[fw.args.index(flag) + 1])


def _one(found: list[dict[str, Any]], kind: str, name: str, rank: int) -> dict[str, Any]:
    if len(found) != 1:
        raise RealNodeFailure(f"TrainJob {name}: rank {rank} logged {len(found)} {kind!r} events, expected 1")
    return found[0]


def check_metrics(fw: Framework, name: str, dones: list[dict[str, Any]]) -> None:
    """What each framework's run must show in its ranks' final events."""
    digest = "model_sha256" if fw.name == "xgboost" else "weights_sha256"
    if len({d[digest] for d in dones}) != 1:
        raise RealNodeFailure(f"TrainJob {name}: the ranks ended with different models: {[d[digest] for d in dones]}")
    d = dones[0]
    if fw.name in ("jax", "mlx") and not d["loss_last"] < min(1e-3, d["loss_first"]):
        raise RealNodeFailure(f"TrainJob {name}: the loss did not fall below 1e-3 ({d['loss_first']:.4g} -> "
                              f"{d['loss_last']:.4g})")
    if fw.name == "xgboost" and not (d["test_accuracy"] > d["baseline_accuracy"] + 0.2
                                     and d["test_logloss"] < d["baseline_logloss"] and d["same_model_as_rank0"]):
        raise RealNodeFailure(f"TrainJob {name}: the model does not beat the baseline: accuracy "
                              f"{d['test_accuracy']:.3f} vs {d['baseline_accuracy']:.3f}, logloss "
                              f"{d['test_logloss']:.3f} vs {d['baseline_logloss']:.3f}")


def submit_framework(kubeconfig: Path, framework: str, cpu: str = "500m", memory: str = "1536Mi") -> tuple[str, list[str]]:
    """Submit examples/<framework> with NODES nodes through the SDK, as an ML engineer does: the TrainJob's name
    and the runtimes the SDK lists (which must include the framework's)."""
    fw = FRAMEWORKS[framework]
    tc = client(kubeconfig)
    listed = sorted(r.name for r in tc.list_runtimes())
    if fw.runtime not in listed:
        raise RealNodeFailure(f"TrainerClient().list_runtimes() does not list {fw.runtime}: {', '.join(listed)}")
    sdk = example_module("sdk_submit")
    args = sdk.parse_args(["--runtime", fw.runtime, "--num-nodes", str(NODES), "--cpu", cpu, "--memory", memory,
                           "--namespace", SMOKE_NS, "--script", str(paths.repo_root() / "examples" / fw.script),
                           "--", *fw.args])
    return tc.train(runtime=fw.runtime, trainer=sdk.build_trainer(args)), listed


def train_framework_with_sdk(kube: Any, kubeconfig: Path, framework: str, lock: Any, timeout: int = 300,
                             cpu: str = "500m", memory: str = "1536Mi", real_nodes: int = 1,
                             submitted: tuple[str, list[str]] | None = None,
                             watch: PodWatch | None = None) -> dict[str, Any]:
    """Train examples/<framework> with NODES nodes through the SDK (or follow SUBMITTED, what submit_framework
    returned for it, and WATCH, its pods' PodWatch since then); with REAL_NODES >= NODES its pods must have run
    on different nodes (the golden CPU runtime spreads them)."""
    fw = FRAMEWORKS[framework]
    tc = client(kubeconfig)
    name, listed = submitted or submit_framework(kubeconfig, framework, cpu, memory)
    # an MPI job's node pods are deleted once its launcher ends (JobSet's success policy): seen while they run
    seen = watch or (PodWatch(kube, name) if fw.mpi else None)
    try:
        wait_complete(tc, kube, name, timeout)
    finally:
        if seen:
            seen.stop()
    starts, dones = [], []
    launcher = list(tc.get_job_logs(name, step="node-0")) if fw.mpi else []
    for rank in range(NODES):
        lines = launcher or list(tc.get_job_logs(name, step=f"node-{rank}"))
        starts.append(_one([e for e in events(lines, "start") if not fw.mpi or e.get("rank") == rank], "start", name, rank))
        dones.append(_one([e for e in events(lines, "done") if not fw.mpi or e.get("rank") == rank], "done", name, rank))
    for rank, (start, done) in enumerate(zip(starts, dones, strict=True)):
        if (start["rank"], start["world_size"], done["world_size"]) != (rank, NODES, NODES):
            raise RealNodeFailure(f"TrainJob {name}: pod {rank} ran as rank {start['rank']} of {start['world_size']}, "
                                  f"expected rank {rank} of {NODES}")
        if start["allreduce"] != start["allreduce_expected"]:
            raise RealNodeFailure(f"TrainJob {name}: rank {rank}'s all-reduce gave {start['allreduce']}, expected "
                                  f"{start['allreduce_expected']}")
    check_metrics(fw, name, dones)
    pods = sorted({**(seen.pods if seen else {}), **{p["pod"]: p for p in map(pod_facts, pods_of(kube, name))}}.values(),
                  key=lambda p: p["pod"])
    image = images.reference(fw.image, lock)
    if fw.mpi:
        check_mpi_pods(name, pods, starts, image)
    else:
        good = [p for p in pods if p["phase"] == "Succeeded" and p["exit_code"] == 0 and p["image"] == image]
        if len(pods) != NODES or len(good) != NODES:
            raise RealNodeFailure(f"TrainJob {name}: expected {NODES} pods Succeeded with exit code 0 on {image}, "
                                  f"got {pods}")
    if real_nodes >= NODES and len({p["node"] for p in pods}) != NODES:
        raise RealNodeFailure(f"TrainJob {name}: its {NODES} pods ran on {sorted({p['node'] for p in pods})}, not on "
                              f"{NODES} different real nodes")
    return {"name": name, "framework": fw.name, "runtime": fw.runtime, "image": image, "world_size": NODES,
            "pods": pods, "metrics": dones[0], "ranks": dones, "starts": starts, "runtimes": listed}


class PodWatch:
    """The pods of TrainJob NAME as last seen (pod_facts by pod name), listed every half second in a thread until
    stop(): what an MPI job's node pods were while they ran, before JobSet deletes them."""

    def __init__(self, kube: Any, name: str) -> None:
        self.kube, self.name = kube, name
        self.pods: dict[str, dict[str, Any]] = {}
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, name=f"pods-of-{name}", daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.done.is_set():
            # a failed list is retried at the next tick; the check reads what was seen
            with contextlib.suppress(Exception):
                self.pods.update({p["pod"]: p for p in map(pod_facts, pods_of(self.kube, self.name))})
            self.done.wait(0.5)

    def stop(self) -> None:
        self.done.set()
        self.thread.join(timeout=10)


def check_mpi_pods(name: str, pods: list[dict[str, Any]], starts: list[dict[str, Any]], image: str) -> None:
    """An MPI TrainJob's pods: NODES of them on IMAGE (the launcher and NODES - 1 node pods running sshd, each a
    rank); the launcher Succeeded with exit code 0 (mpirun's: every rank's); the node pods were Running (JobSet
    stops them once the launcher ends); and the ranks ran in NODES different pods, each naming its own (a rank's
    host name is its pod's, which JobSet sets: <job>-<replicated job>-<job index>-<pod index>)."""
    launchers = [p for p in pods if "-launcher-" in p["pod"]]
    if len(pods) != NODES or len(launchers) != 1 or any(p["image"] != image for p in pods):
        raise RealNodeFailure(f"TrainJob {name}: expected {NODES} pods on {image}, one of them the launcher, "
                              f"got {pods}")
    if (launchers[0]["phase"], launchers[0]["exit_code"]) != ("Succeeded", 0):
        raise RealNodeFailure(f"TrainJob {name}: its launcher (mpirun) ended {launchers[0]['phase']} with exit code "
                              f"{launchers[0]['exit_code']}")
    idle = [p["pod"] for p in pods if p not in launchers and p["phase"] not in ("Running", "Succeeded")]
    if idle:
        raise RealNodeFailure(f"TrainJob {name}: node pods {idle} were never seen running")
    hosts = sorted(str(s.get("host")) for s in starts)
    if hosts != sorted(str(p["hostname"]) for p in pods):
        raise RealNodeFailure(f"TrainJob {name}: its ranks ran on {hosts}, not one in each of its pods "
                              f"(host names {sorted(str(p['hostname']) for p in pods)})")


def describe(r: dict[str, Any]) -> str:
    m = r["metrics"]
    where = ", ".join(f"{p['pod']} on {p['node']}" for p in r["pods"])
    if r["framework"] == "jax":
        result = f"loss {m['loss_first']:.4g} -> {m['loss_last']:.4g} in {m['steps']} psum steps, same weights"
    elif r["framework"] == "mlx":
        result = (f"loss {m['loss_first']:.4g} -> {m['loss_last']:.4g} in {m['steps']} steps of gradients "
                  "averaged over MPI, same weights")
    else:
        result = (f"held-out accuracy {m['test_accuracy']:.3f} vs baseline {m['baseline_accuracy']:.3f}, logloss "
                  f"{m['test_logloss']:.3f} vs {m['baseline_logloss']:.3f}, same model")
    return (f"TrainerClient().train -> {r['name']} on {RELEASE}'s {r['runtime']} ({r['image']}), "
            f"{r['world_size']} processes ({where}): {result} on both ranks (read with get_job_logs)")


class FrameworkSteps(IsolationSteps):
    """The real nodes' steps plus a JAX, an XGBoost and an MLX TrainJob (mixed into Suite)."""

    framework_runs: dict[str, dict[str, Any]]  # each framework's result (train_framework_with_sdk)
    # framework -> (TrainJob, runtimes listed, its pods' PodWatch for an MPI one): submitted beside another
    submitted_early: dict[str, tuple[str, list[str], PodWatch | None]]

    def real_node_steps(self) -> list[tuple[str, StepFn]]:
        steps = super().real_node_steps()
        # the MLX TrainJob first waits for its node pods' readiness (5 s): submitted before the light steps
        at = next((i for i, (step, _) in enumerate(steps) if step.startswith("a TrainJob whose pods cannot")), len(steps))
        steps.insert(at, ("SDK MLX TrainJob submitted (trains beside the next steps)", lambda: self.submit_beside("mlx")))
        return [*steps,
                ("SDK JAX TrainJob trains across real nodes", lambda: self.sdk_framework("jax", beside=("xgboost",))),
                ("SDK XGBoost TrainJob trains across real nodes", lambda: self.sdk_framework("xgboost")),
                ("SDK MLX TrainJob trains across real nodes over MPI", lambda: self.sdk_framework("mlx")),
                *([("JAX, XGBoost, MLX and restarted runs are in MLflow", self.tracked_runs)]
                  if getattr(self.provider, "tracking", False) else []),
                ("TrainJobs naming only a runtime Complete", self.runtime_only)]

    def tracked_runs(self) -> Outcome:
        """The JAX, XGBoost and MLX TrainJobs' runs, each with its own metrics and model; the killed-worker TrainJob's
        runs: FAILED for the attempt whose worker was killed, FINISHED for the one that resumed. Then the server's
        metrics, scraped as Prometheus would: every series the alerts use, every request counted by status."""
        finished = {r["name"]: (fw, steps_of(FRAMEWORKS[fw])) for fw, r in getattr(self, "framework_runs", {}).items()}
        killed = getattr(self, "killed", None)
        restarted = (killed["name"],) if killed and killed["state"] == "Complete" else ()
        if not finished and not restarted:
            return Outcome("skipped: no JAX, XGBoost or restarted TrainJob ran", {})
        read = trackingmod.check_runs(self.kube, self.lock, finished, restarted)
        said = []
        for name, (kind, _) in finished.items():
            run, metric = read["runs"][name][0], trackingmod.EXPECTED[kind].history
            said.append(f"{name}: {run['status']}, {metric} at {len(run['histories'][metric])} steps, "
                        f"{', '.join(run['artifacts'])}")
        said += [f"{name}: {' then '.join(r['status'] for r in read['runs'][name])}" for name in restarted]
        # after the runs were read (and the other team refused): the server counted it all, for Prometheus
        metrics = trackingmod.check_metrics(self.kube, self.lock)
        said.append("server metrics: " + ", ".join(f"{n:.0f} x {status}" for status, n in
                                                   sorted(metrics["requests"].items())))
        return Outcome("; ".join(said), {**read, "metrics": metrics})

    def runtime_only(self) -> Outcome | str:
        """A TrainJob with nothing but runtimeRef on each CPU runtime whose image is built here: the
        image's default command runs (upstream's images have one too) and the TrainJob ends Complete."""
        # (mlx-cpu's default command is checked on the image, tests/e2e/test_framework_images.py: a TrainJob on an
        # MPI runtime waits for its node pods' readiness before its launcher runs it, about 12 s more here)
        runtimes = {"torch-distributed": "torch-cpu", "jax-distributed": "jax-cpu", "xgboost-distributed": "xgboost-cpu"}
        rendered = {r["metadata"]["name"] for r in golden_runtimes(self.rendered)}
        jobs = {f"plain-{rt.split('-')[0]}": (rt, built) for rt, built in runtimes.items() if rt in rendered}
        if not jobs:
            return f"skipped: env {self.env} renders none of {', '.join(runtimes)}"
        manifests = [{"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainJob",
                      "metadata": {"name": name, "namespace": SMOKE_NS},
                      "spec": {"runtimeRef": {"name": rt, "kind": "ClusterTrainingRuntime", "apiGroup": GROUP}}}
                     for name, (rt, _) in jobs.items()]
        self.kube.kubectl("apply", "-f", "-", input_text=yaml.safe_dump_all(manifests))
        self.wait_trainjobs({name: "Complete" for name in jobs}, timeout=self.provider.job_timeout)
        seen: list[str] = []
        found: dict[str, Any] = {}
        for name, (rt, built) in jobs.items():
            pods = [pod_facts(p) for p in pods_of(self.kube, name)]
            image = images.reference(built, self.lock)
            if not pods or any((p["phase"], p["exit_code"], p["image"]) != ("Succeeded", 0, image) for p in pods):
                raise RealNodeFailure(f"TrainJob {name} on {rt}: expected its pods Succeeded with exit code 0 on "
                                      f"{image}, got {pods}")
            seen.append(f"{rt} ({image.rsplit('/', 1)[-1]})")
            found[name] = {"runtime": rt, "image": image, "pods": pods}
        self.kube.kubectl("delete", "trainjob", *jobs, "-n", SMOKE_NS, "--wait=false", check=False)
        return Outcome(f"no trainer, no command: the image's default command ran and ended Complete on "
                       f"{', '.join(seen)}", {"jobs": found})

    def submit_beside(self, *frameworks: str) -> Outcome:
        """Submit FRAMEWORKS' TrainJobs through the SDK and leave them running; each one's own step follows it."""
        said = []
        for framework in frameworks:
            name, listed = submit_framework(self.provider.kubeconfig, framework)
            watch = PodWatch(self.kube, name) if FRAMEWORKS[framework].mpi else None  # from its start
            self.submitted_early = {**getattr(self, "submitted_early", {}), framework: (name, listed, watch)}
            said.append(f"{name} on {FRAMEWORKS[framework].runtime}")
        return Outcome(f"TrainerClient().train -> {', '.join(said)}", {"submitted": said})

    def sdk_framework(self, framework: str, beside: tuple[str, ...] = ()) -> Outcome:
        """FRAMEWORK's TrainJob, through the SDK, to its end; with BESIDE, those frameworks' TrainJobs are submitted
        first and left running beside it (their own steps follow it), as engineers' jobs share the nodes."""
        early = getattr(self, "submitted_early", {}).get(framework)
        if beside:
            self.submit_beside(*beside)
        r = train_framework_with_sdk(self.kube, self.provider.kubeconfig, framework, self.lock,
                                     timeout=int(self.provider.job_timeout),
                                     real_nodes=self.real_node_count(),
                                     submitted=early[:2] if early else None, watch=early[2] if early else None)
        self.framework_runs = {**getattr(self, "framework_runs", {}), framework: r}
        return Outcome(describe(r), r)
