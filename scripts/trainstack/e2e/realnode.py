"""The e2e checks only a real node can answer: a TrainJob that really trains, submitted as an ML
engineer does (the Kubeflow SDK), its checkpoint outliving its pods, and what a killed worker does.

`train_with_sdk` lists the runtimes and submits examples/train_ddp.py on `torch-distributed` with
two nodes through `TrainerClient().train(...)`, waits with `wait_for_job_status`, reads the loss
from `get_job_logs`, and checks from the cluster's objects where it ran: with two real nodes, its pods
on different nodes, pod IPs in the nodes' pod CIDRs, rank 1's rendezvous address resolving to rank 0's
pod on the other node, and the gradients on the nodes' links. `checkpoint_outlives_pods`
deletes the TrainJob and loads the checkpoint in a fresh pod that mounts the same claim.
`worker_killed` deletes a worker pod mid-run and follows the TrainJob to its end.
`RealNodeSteps` are the Suite's steps built on these (mixed into Suite).
"""

from __future__ import annotations

import importlib
import ipaddress
import json
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from .. import images, kubeapi, paths
from .. import status as statusmod
from ..api import GANG_GROUP
from ..errors import UserError
from ..jsontypes import dig
from . import netreach
from . import tracking as trackingmod
from .base import GROUP, RELEASE, SMOKE_NS, VERSION, Outcome, StepFn, SuiteFailure
from .cannotstart import cannot_start
from .jobpods import FirstFailures, pod_facts, pods_of, why_not_complete
from .smokejobs import SmokeJob, golden_runtimes
from .suitestate import SuiteState

RUNTIME = "torch-distributed"
NODES = 2
STEPS = 40
# the MLP's width: wide enough that its gradients (about 70k parameters, 280 kB a step) dwarf the nodes'
# other traffic over a run, so the byte counters of the links show the all-reduce crossing
HIDDEN = 256
OUTPUT = "/workspace/output"


class RealNodeFailure(UserError):
    pass


def example_module(name: str):
    """examples/<name>.py, imported from the checkout (the file users run)."""
    sys.path.insert(0, str(paths.repo_root() / "examples"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.pop(0)


def _sdk_examples():
    return example_module("sdk_submit")


def client(kubeconfig: Path):
    # the Kubeflow SDK is optional (the `train` extra): only the real node's steps need it
    try:
        from kubeflow.common.types import KubernetesBackendConfig
        from kubeflow.trainer import TrainerClient
    except ImportError as e:
        raise UserError(
            f"the real-node steps need the Kubeflow SDK ({e.name} is not installed): "
            "run `trainstack smoke install` (make e2e does)"
        ) from None

    return TrainerClient(backend_config=KubernetesBackendConfig(namespace=SMOKE_NS, config_file=str(kubeconfig)))


def losses(lines: list[str]) -> list[float]:
    out = []
    for line in lines:
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("event") == "step":
            out.append(float(record["loss"]))
    return out


def events(lines: list[str], kind: str) -> list[dict[str, Any]]:
    """The KIND events of the examples' JSON lines. Under mpirun two ranks' lines can reach the log as one (the
    forwarded output of each rank arrives in pieces: `{rank 0}{rank 1}` then the two newlines), so every JSON
    object of a line counts."""
    decoder = json.JSONDecoder()
    out = []
    for line in lines:
        text, at = line.strip(), 0
        while at < len(text):
            try:
                record, end = decoder.raw_decode(text, at)
            except ValueError:
                break
            if isinstance(record, dict) and record.get("event") == kind:
                out.append(record)
            at = end
            while at < len(text) and text[at].isspace():
                at += 1
    return out


def pod_cpu(real_nodes: int) -> str:
    """The CPU each pod of a NODES-node torch TrainJob asks for (requests and limits, through the SDK): one where
    every pod has a real node of its own, half of one where they share the only one (so both fit). A start costs
    about 5 s of CPU here (torchrun and the trainer each import torch): at half a CPU a job's start, and its restart
    after a worker is killed, took 10 to 15 s longer."""
    return "1" if real_nodes >= NODES else "500m"


def submit(kubeconfig: Path, train_args: list[str], cpu: str = "500m", memory: str = "1536Mi") -> str:
    sdk = _sdk_examples()
    args = sdk.parse_args(["--runtime", RUNTIME, "--num-nodes", str(NODES), "--cpu", cpu, "--memory", memory,
                           "--namespace", SMOKE_NS, "--", *train_args])
    return client(kubeconfig).train(runtime=RUNTIME, trainer=sdk.build_trainer(args))


def wait_complete(tc: Any, kube: Any, name: str, timeout: int) -> FirstFailures:
    """Wait through the SDK for TrainJob NAME to be Complete, reading each pod's first failed container log as it
    happens (jobpods.FirstFailures: what it found, for the result); RealNodeFailure with why it did not complete,
    those logs included."""
    first = FirstFailures(kube, SMOKE_NS, lambda: pods_of(kube, name))
    try:
        tc.wait_for_job_status(name, status={"Complete"}, timeout=timeout, polling_interval=1,
                               callbacks=[first.check])
    except (RuntimeError, TimeoutError, ValueError) as err:
        first.check()
        earlier = f"; {first.summary()}" if first.found else ""
        raise RealNodeFailure(f"TrainJob {name} did not reach Complete: {why_not_complete(kube, name, err)}"
                              f"{earlier}") from None
    return first


def gang_of(kube: Any, name: str, pods: list[dict[str, Any]]) -> dict[str, Any]:
    """The native gang (docs/scheduling.md) of TrainJob NAME, from PODS (pod_facts) and the PodGroup they name:
    its name, gang minCount, and the seconds between the first and the last pod's binding."""
    groups = {p["pod_group"] for p in pods}
    if len(groups) != 1 or None in groups:
        raise RealNodeFailure(f"TrainJob {name}: its pods name the PodGroups {sorted(map(str, groups))}, not one "
                              "(the control plane runs the native gang scheduler: every multi-node Job gets one)")
    group = groups.pop()
    api = kubeapi.for_kube(kube)
    found = [g for g in kubeapi.items(api, kubeapi.resource(api, "podgroups", SMOKE_NS))
             if g["metadata"]["name"] == group]
    if not found:
        raise RealNodeFailure(f"TrainJob {name}: its pods name PodGroup {group}, which {SMOKE_NS} does not have")
    policy = found[0].get("spec", {}).get("schedulingPolicy") or {}
    times = sorted(datetime.fromisoformat(p["scheduled_at"]) for p in pods if p["scheduled_at"])
    spread = (times[-1] - times[0]).total_seconds() if len(times) == len(pods) else None
    return {"pod_group": group, "min_count": dig(policy, "gang", "minCount"), "bound_within_s": spread}


def in_cidr(ip: str | None, cidr: str | None) -> bool:
    return bool(ip and cidr) and ipaddress.ip_address(ip) in ipaddress.ip_network(cidr)  # type: ignore[arg-type]


def rendezvous_of(kube: Any, pod: str) -> dict[str, Any]:
    """The `rendezvous` event a train_ddp.py rank logged: its host and what MASTER_ADDR resolved to."""
    out = kube.kubectl("logs", pod, "-n", SMOKE_NS, check=False).stdout.splitlines()
    found = events(out, "rendezvous")
    return found[0] if found else {}


def train_with_sdk(kube: Any, kubeconfig: Path, real_nodes: list[Any], timeout: int = 300) -> dict[str, Any]:
    """The SDK path on the real nodes: list runtimes, train examples/train_ddp.py with NODES nodes, read the loss;
    then check from the cluster's objects where it ran. With two or more real nodes the pods ran on different
    nodes, each pod IP in its node's spec.podCIDR, rank 1 resolved the rendezvous address to rank 0's pod on
    the other node, and the gradients crossed the link of every node but real-0 (its byte counters)."""
    tc = client(kubeconfig)
    listed = sorted(r.name for r in tc.list_runtimes())
    if RUNTIME not in listed:
        raise RealNodeFailure(f"TrainerClient().list_runtimes() does not list {RUNTIME}: {', '.join(listed)}")
    linked = [n for n in real_nodes if n.linked]
    before = {n.name: n.link_bytes() for n in linked}
    name = submit(kubeconfig, ["--steps", str(STEPS), "--seed", "0", "--hidden", str(HIDDEN), "--output-dir", OUTPUT],
                  cpu=pod_cpu(len(real_nodes)))
    first = wait_complete(tc, kube, name, timeout)
    after = {n.name: n.link_bytes() for n in linked}
    lines = list(tc.get_job_logs(name))
    loss = losses(lines)
    if len(loss) != STEPS:
        raise RealNodeFailure(f"TrainJob {name}: rank 0 logged {len(loss)} steps, expected {STEPS} "
                              f"(last log line: {lines[-1][:200] if lines else 'none'})")
    if not loss[-1] < loss[0] * 0.5:
        raise RealNodeFailure(f"TrainJob {name}: the loss did not fall ({loss[0]:.4f} -> {loss[-1]:.4f})")
    start = events(lines, "start")
    if not start or start[0].get("world_size") != NODES or start[0].get("backend") != "gloo":
        raise RealNodeFailure(f"TrainJob {name}: rank 0 did not start a {NODES}-process gloo group: {start[:1]}")
    pods = sorted((pod_facts(p) for p in pods_of(kube, name)), key=lambda f: f["pod"])
    names = {n.name for n in real_nodes}
    ok = [f for f in pods if f["node"] in names and f["phase"] == "Succeeded" and f["exit_code"] == 0]
    if len(ok) != NODES or len(pods) != NODES:
        raise RealNodeFailure(f"TrainJob {name}: expected {NODES} pods Succeeded (exit 0) on the real nodes, got "
                              f"{[(f['pod'], f['node'], f['phase'], f['exit_code']) for f in pods]}")
    cidrs = {n["metadata"]["name"]: n.get("spec", {}).get("podCIDR") for n in kubeapi.items(
        kubeapi.for_kube(kube), kubeapi.core_objects(kubeapi.for_kube(kube), "nodes"))}
    for f in pods:
        f["node_pod_cidr"] = cidrs.get(f["node"])
        if not in_cidr(f["ip"], f["node_pod_cidr"]):
            raise RealNodeFailure(f"TrainJob {name}: pod {f['pod']} has IP {f['ip']}, outside {f['node']}'s pod CIDR "
                                  f"{f['node_pod_cidr']}")
    used = sorted({f["node"] for f in pods})
    result: dict[str, Any] = {"name": name, "loss_first": loss[0], "loss_last": loss[-1], "pods": pods,
                              "nodes": used, "runtimes": listed, "params": start[0].get("params"),
                              "first_failures": first.found}  # a rank that failed once yet the job completed
    # all or nothing, where the control plane runs the native gang scheduler (the lock's gates: 1.36 only; the
    # other releases of `make test-matrix` serve no PodGroups): the Job controller gave the node step's Job one
    # PodGroup of the job's size, and the scheduler bound both pods together (tests/integration/test_gang.py
    # and tests/e2e/test_node_loss.py have the job that cannot fit)
    served = kube.kubectl("api-resources", f"--api-group={GANG_GROUP}", "-o", "name", check=False).stdout.split()
    result["gang"] = gang_of(kube, name, pods) if f"podgroups.{GANG_GROUP}" in served else None
    if result["gang"] and (result["gang"]["min_count"] != NODES or result["gang"]["bound_within_s"] is None):
        raise RealNodeFailure(f"TrainJob {name}: its PodGroup is not a gang of {NODES} bound together: {result['gang']}")
    rank0 = next(f for f in pods if f["index"] == 0)
    rank1 = next(f for f in pods if f["index"] == 1)
    result["rendezvous"] = rendezvous_of(kube, rank1["pod"])
    if len(real_nodes) >= NODES:
        if len(used) != NODES:
            raise RealNodeFailure(f"TrainJob {name}: its {NODES} pods ran on {used}, not on {NODES} different real "
                                  f"nodes (the golden CPU runtime spreads a job's pods over nodes)")
        if result["rendezvous"].get("master_ip") != rank0["ip"]:
            raise RealNodeFailure(f"TrainJob {name}: rank 1 on {rank1['node']} resolved the rendezvous address "
                                  f"{result['rendezvous'].get('master_addr')} to {result['rendezvous'].get('master_ip')}, "
                                  f"not to rank 0's pod {rank0['ip']} on {rank0['node']}")
        # DDP all-reduces every parameter's gradient (4 bytes each) every step: whatever the algorithm, each of
        # two ranks sends at least half of it (a ring sends all of it). The link of the node running a rank
        # carries at least that each way, or the all-reduce did not cross (its other traffic is well under).
        gradient_bytes = int(start[0].get("params") or 0) * 4 * STEPS // 2
        crossed = {n: {"rx": after[n]["rx"] - before[n]["rx"], "tx": after[n]["tx"] - before[n]["tx"]}
                   for n in before if n in used}
        result["link_bytes"] = crossed
        result["gradient_bytes"] = gradient_bytes
        short = [n for n, d in crossed.items() if min(d["rx"], d["tx"]) < gradient_bytes]
        if not crossed or short or not gradient_bytes:
            raise RealNodeFailure(f"TrainJob {name}: the links of {short or used} carried {crossed} bytes, less than "
                                  f"the {gradient_bytes} bytes of gradients a {NODES}-node DDP run sends at least")
    return result


def claims_of(kube: Any, name: str) -> list[str]:
    """PVCs JobSet made for this TrainJob's output volume (volumeClaimPolicies: named <volume>-<jobset>)."""
    api = kubeapi.for_kube(kube)
    items = kubeapi.items(api, kubeapi.resource(api, "persistentvolumeclaims", SMOKE_NS))
    return sorted(c["metadata"]["name"] for c in items if c["metadata"]["name"].endswith(f"-{name}"))


CHECK = """
import json, sys, torch
sys.path.insert(0, "/scripts")
import train_ddp as t
state = t.load_checkpoint(t.Path("{output}") / t.CHECKPOINT_NAME)
cfg = state["config"]
weights = t.teacher(state["seed"], cfg["features"])
x, y = t.batch(state["seed"], 10**6, 0, 1, 256, cfg["features"], weights)
torch.manual_seed(state["seed"])
fresh = t.build_model(cfg["features"], cfg["hidden"])
with torch.no_grad():
    trained = torch.nn.functional.mse_loss(state["module"](x), y).item()
    untrained = torch.nn.functional.mse_loss(fresh(x), y).item()
print(json.dumps({{"step": state["step"], "world_size": state["world_size"], "trained_loss": trained,
                  "untrained_loss": untrained}}))
"""


def checkpoint_outlives_pods(kube: Any, name: str, image: str, timeout: float = 120) -> dict[str, Any]:
    claims = claims_of(kube, name)
    if not claims:
        raise RealNodeFailure(f"TrainJob {name} has no output PVC in {SMOKE_NS}")
    kube.kubectl("delete", "trainjob", name, "-n", SMOKE_NS, "--wait=true", "--timeout=60s", timeout=90)
    api = kubeapi.for_kube(kube)
    if not kubeapi.wait_for(api, kubeapi.pods(api), lambda found: not found, 60, namespace=SMOKE_NS,
                            label_selector=f"jobset.sigs.k8s.io/jobset-name={name}"):
        raise RealNodeFailure(f"pods of TrainJob {name} still there 60s after deleting it")
    if claims_of(kube, name) != claims:
        raise RealNodeFailure(f"deleting TrainJob {name} deleted its output claim {claims[0]}")
    script = (paths.repo_root() / "examples" / "train_ddp.py").read_text()
    pod = f"checkpoint-{name}"[:60]
    objects = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": pod, "namespace": SMOKE_NS},
         "data": {"train_ddp.py": script, "check.py": CHECK.format(output=OUTPUT)}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod, "namespace": SMOKE_NS},
         "spec": {"restartPolicy": "Never", "nodeSelector": {"trainstack.io/node": "real"},
                  "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000,
                                      "seccompProfile": {"type": "RuntimeDefault"}},
                  "containers": [{"name": "check", "image": image, "command": ["python", "/scripts/check.py"],
                                  "securityContext": {"allowPrivilegeEscalation": False,
                                                      "capabilities": {"drop": ["ALL"]}},
                                  # a CPU to import torch in (2.5 s of CPU here)
                                  "resources": {"requests": {"cpu": "250m", "memory": "1Gi"},
                                                "limits": {"cpu": "1", "memory": "1536Mi"}},
                                  "volumeMounts": [{"name": "scripts", "mountPath": "/scripts"},
                                                   {"name": "output", "mountPath": OUTPUT}]}],
                  "volumes": [{"name": "scripts", "configMap": {"name": pod}},
                              {"name": "output", "persistentVolumeClaim": {"claimName": claims[0]}}]}},
    ]
    kube.kubectl("apply", "-f", "-", input_text=yaml.safe_dump_all(objects))
    def ended(found: dict[str, dict[str, Any]]) -> str | None:
        phase = dig(found, pod, "status", "phase")
        return phase if phase in ("Succeeded", "Failed") else None

    phase = kubeapi.wait_for(api, kubeapi.pods(api), ended, timeout, namespace=SMOKE_NS,
                             field_selector=f"metadata.name={pod}")
    if phase is None:
        raise RealNodeFailure(f"checkpoint pod {pod} not done within {timeout:.0f}s")
    out = kube.kubectl("logs", pod, "-n", SMOKE_NS, check=False).stdout.strip().splitlines()
    if phase != "Succeeded" or not out:
        raise RealNodeFailure(f"checkpoint pod {pod} {phase}: {out[-1] if out else 'no output'}")
    result = json.loads(out[-1])
    if result["step"] != STEPS or result["world_size"] != NODES:
        raise RealNodeFailure(f"checkpoint on {claims[0]} is from step {result['step']} of a world of "
                              f"{result['world_size']}, expected step {STEPS} of {NODES}")
    if not result["trained_loss"] < result["untrained_loss"] * 0.5:
        raise RealNodeFailure(f"checkpoint on {claims[0]} does not hold trained weights: loss {result['trained_loss']:.4f} "
                              f"vs {result['untrained_loss']:.4f} untrained")
    kube.kubectl("delete", "pod,configmap", pod, "-n", SMOKE_NS, "--wait=false", check=False)
    return {"claim": claims[0], **result}


def _rank0_steps(kube: Any, name: str) -> int:
    """The last step rank 0 logged so far (0 when none)."""
    pods = [p for p in pods_of(kube, name) if p["metadata"]["name"].startswith(f"{name}-node-0-0")
            and p.get("status", {}).get("phase") == "Running"]
    if not pods:
        return 0
    out = kube.kubectl("logs", pods[0]["metadata"]["name"], "-n", SMOKE_NS, "--tail=5", check=False).stdout
    steps = [int(r["step"]) for r in events(out.splitlines(), "step")]
    return max(steps) if steps else 0


def worker_killed(kube: Any, kubeconfig: Path, timeout: float = 300, real_nodes: int = 1) -> dict[str, Any]:
    """Kill the rank-1 worker pod in the middle of a run and follow the TrainJob to its end.

    The job checkpoints every 50 steps and is started with --resume, so whatever restarts its
    pods (the Job's backoff, or JobSet's failure policy) continues from the last checkpoint.
    """
    # A step takes milliseconds here (about 110 a second on this 2-core machine), and every step all-reduces, so
    # rank 0 cannot run ahead once its peer is gone: the kill, within a second of rank 0 logging step 50, lands
    # mid-run after a checkpoint, and the 450 steps left after the restart take about 4 s (the restart itself,
    # the Job's 10 s backoff before it replaces a failed pod and torch started again, about 20 s with a CPU
    # per pod).
    steps, every = 500, 50
    name = submit(kubeconfig, ["--steps", str(steps), "--seed", "1", "--output-dir", OUTPUT,
                               "--checkpoint-every", str(every), "--resume"], cpu=pod_cpu(real_nodes))
    deadline = time.monotonic() + timeout
    while _rank0_steps(kube, name) < every:
        if time.monotonic() > deadline:
            raise RealNodeFailure(f"TrainJob {name} did not reach step {every} within {timeout:.0f}s")
        time.sleep(0.2)
    victims = [p["metadata"]["name"] for p in pods_of(kube, name) if "-node-0-1" in p["metadata"]["name"]
               and p.get("status", {}).get("phase") == "Running"]
    if not victims:
        raise RealNodeFailure(f"TrainJob {name} has no rank-1 pod to kill")
    killed_at = time.monotonic()
    kube.kubectl("delete", "pod", victims[0], "-n", SMOKE_NS, "--grace-period=0", "--force", "--wait=false")
    tc = client(kubeconfig)
    api = kubeapi.for_kube(kube)

    def ended(found: dict[str, dict[str, Any]]) -> tuple[str, str] | None:
        for cond in dig(found, name, "status", "conditions") or []:
            if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
                return cond["type"], f"{cond.get('reason', '')}: {cond.get('message', '')}"
        return None

    trainjobs = kubeapi.custom_objects(api, GROUP, VERSION, "trainjobs", SMOKE_NS)
    outcome = kubeapi.wait_for(api, trainjobs, ended, max(1.0, deadline - time.monotonic()),
                               field_selector=f"metadata.name={name}")
    if outcome is None:
        raise RealNodeFailure(f"TrainJob {name} neither Complete nor Failed {timeout:.0f}s after a worker was killed")
    state, message = outcome
    result: dict[str, Any] = {"name": name, "state": state, "message": message, "killed": victims[0],
                              "seconds_to_end": round(time.monotonic() - killed_at, 1)}
    if state == "Complete":
        lines = list(tc.get_job_logs(name))
        starts = events(lines, "start")
        done = events(lines, "done")
        if (not starts or not starts[-1].get("resumed") or not done or done[-1].get("step") != steps
                or done[-1].get("steps_run", steps) >= steps):
            raise RealNodeFailure(f"TrainJob {name} completed after a worker was killed but did not resume from its "
                                  f"checkpoint to step {steps} (start: {starts[-1:]}, done: {done[-1:]})")
        result["resumed_from"] = starts[-1].get("start_step")
    elif not message.strip(": "):
        raise RealNodeFailure(f"TrainJob {name} ended Failed without a reason")
    else:  # the rarer ending (26 to 34 s Complete is usual; Failed took 215 s once): what each pod ended as
        result["pods"] = [pod_facts(p) for p in pods_of(kube, name)]
    kube.kubectl("delete", "trainjob", name, "-n", SMOKE_NS, "--wait=false", check=False)
    return result


# -- the Suite's steps on the real node -----------------------------------------------------------------


class RealNodeSteps(SuiteState):
    """The Suite's steps that need the real node (mixed into Suite: uses its kube, provider, rendered,
    lock, read and wait_trainjobs)."""

    trained: dict[str, Any]  # the SDK TrainJob's result (train_with_sdk)
    killed: dict[str, Any]  # the killed-worker TrainJob's result (worker_killed)
    probes: list[dict[str, Any]]  # who tried the tracking server's port (netreach.start), checked by tracked_run

    def real_node_count(self) -> int:
        """How many real nodes the provider's cluster has (none where it has no such list)."""
        return len(getattr(self.provider.cluster, "nodes", None) or [])

    def real_node_steps(self) -> list[tuple[str, StepFn]]:
        return [
            ("SDK TrainJob trains across real nodes", self.sdk_training),
            *([("its run is in MLflow, and only its team's", self.tracked_run)]
              if getattr(self.provider, "tracking", False) else []),
            ("checkpoint outlives the pods", self.checkpoint_kept),
            ("worker killed mid-run", self.worker_killed),
            ("a TrainJob whose pods cannot start is flagged", self.cannot_start),
            *([("SDK fine-tune (TorchTune) on the GPU pool", self.sdk_finetune)]
              if getattr(self.provider, "nodes", "") == "both" else []),
        ]

    def cannot_start(self) -> Outcome:
        runtime = next(r for r in golden_runtimes(self.rendered) if self.provider.is_real(SmokeJob("x", r))
                       and "torch" in (dig(r, "spec", "mlPolicy") or {}))
        r = cannot_start(self.kube, self.provider.kubeconfig, runtime, self.provider.placement(SmokeJob("x", runtime)),
                         self.job_labels)
        return Outcome(f"TrainJob {r['trainjob']} with an image nobody built: {r['state']}, flagged by trainstack "
                       f"status after {r['seconds']}s ({r['blocked'][:120]})", r)

    def _torchtune_runtime(self) -> str:
        names = sorted(r["metadata"]["name"] for r in golden_runtimes(self.rendered)
                       if r["metadata"]["name"].startswith("torchtune-"))
        return next((n for n in names if "qwen" in n), names[0] if names else "")

    def sdk_finetune(self) -> str:
        """upstream's BuiltinTrainer(TorchTuneConfig) path, through the SDK, onto the simulated GPU pool."""
        sdk = example_module("sdk_finetune")
        runtime = self._torchtune_runtime()
        if not runtime:
            return f"skipped: env {self.env} renders no TorchTune runtime"
        args = sdk.parse_args(["--runtime", runtime, "--namespace", SMOKE_NS])
        initializer, trainer, options = sdk.build(args)  # what sdk_finetune.submit sends, to this cluster
        name = client(self.provider.kubeconfig).train(
            runtime=args.runtime, initializer=initializer, trainer=trainer, options=options or None)
        self.wait_trainjobs({name: "Complete"}, timeout=self.provider.job_timeout)
        nodes = {n["metadata"]["name"]: n for n in self.read("nodes")}
        pods = self.read("pods", SMOKE_NS, label_selector=f"jobset.sigs.k8s.io/jobset-name={name}")
        jobs = sorted({dig(p["metadata"], "labels", "jobset.sigs.k8s.io/replicatedjob-name", default="?")
                       for p in pods})
        off_gpu = [p["metadata"]["name"] for p in pods
                   if not any("gpu" in k for k in (nodes.get(p["spec"].get("nodeName") or "", {})
                                                   .get("status", {}).get("capacity") or {}))]
        if off_gpu:
            raise SuiteFailure(f"TorchTune TrainJob {name}: pods not on GPU nodes: {', '.join(off_gpu)}")
        return (f"BuiltinTrainer(TorchTuneConfig) on {runtime} -> {name} Complete (simulated on the KWOK GPU pool); "
                f"steps: {', '.join(jobs)}")

    def worker_killed(self) -> Outcome:
        r = worker_killed(self.kube, self.provider.kubeconfig, timeout=self.provider.job_timeout,
                          real_nodes=self.real_node_count())
        self.killed = r
        if r["state"] == "Complete":
            return Outcome(f"killed {r['killed']}: the job's pods restarted, resumed from the step-{r['resumed_from']} "
                           f"checkpoint and ended Complete {r['seconds_to_end']}s later", r)
        pods = ", ".join(f"{p['pod']} {p['phase']} exit {p['exit_code']}" for p in r.get("pods", []))
        return Outcome(f"killed {r['killed']}: TrainJob {r['name']} ended Failed {r['seconds_to_end']}s later "
                       f"({r['message'][:160]}); its pods: {pods or 'none left'}", r)

    def sdk_training(self) -> Outcome:
        if getattr(self.provider, "tracking", False):
            # meanwhile, pods in a tracked and an untracked namespace try the tracking server (its NetworkPolicy,
            # enforced on the real nodes); tracked_run reads what they found
            self.probes = netreach.start(self.kube, self.lock, SMOKE_NS, trackingmod.SERVICE, trackingmod.PORT)
        self.trained = train_with_sdk(self.kube, self.provider.kubeconfig, self.provider.cluster.nodes,
                                      timeout=int(self.provider.job_timeout))
        r = self.trained
        where = ", ".join(f"node {f['index']} on {f['node']} ({f['ip']})" for f in r["pods"])
        crossed = "; ".join(f"{n} link {d['tx'] / 1e6:.1f} MB out, {d['rx'] / 1e6:.1f} MB in"
                            for n, d in (r.get("link_bytes") or {}).items())
        return Outcome(f"TrainerClient().train -> {r['name']} on {RELEASE}'s {RUNTIME}: {where}; loss "
                       f"{r['loss_first']:.4f} -> {r['loss_last']:.4f} ({STEPS} steps, get_job_logs)"
                       + (f"; {crossed} (gradients {r['gradient_bytes'] / 1e6:.1f} MB)" if crossed else ""), r)

    def tracked_run(self) -> Outcome:
        name = self.trained["name"]
        read = trackingmod.check_runs(self.kube, self.lock, {name: ("torch", STEPS)})
        r = read["runs"][name][0]
        # `trainstack status --runs` finds the same run in rank 0's log, and links it into MLflow's UI
        found = statusmod.collect(statusmod.Cluster(str(self.provider.kubeconfig)), SMOKE_NS, runs=True,
                                  tracking_url=trackingmod.UI_EXAMPLE, lock=self.lock)
        row = next((t for t in found.trainjobs if t.name == name), None)
        if row is None or row.run_id != r["run_id"]:
            raise RealNodeFailure(f"trainstack status --runs shows run {row.run_id if row else '(no row)'!r} for "
                                  f"TrainJob {name}, MLflow has {r['run_id']}")
        read["status_link"] = row.run_link
        read["network"] = netreach.finish(self.kube, self.probes)
        reach = ", ".join(f"{p['namespace']} on {p['node']} {'admitted' if p['connected'] else 'refused'}"
                          for p in read["network"])
        return Outcome(f"run {r['run_id'][:12]} ({name}) in experiment {SMOKE_NS}: {r['status']}, "
                       f"{len(r['params'])} params, loss at {len(r['histories']['loss'])} steps, final_loss "
                       f"{r['metrics']['final_loss']:.4f}, artifacts {', '.join(r['artifacts'])}; "
                       f"{trackingmod.OTHER_NS}'s account refused ({read.get('other_refusal', '')[:60]}); "
                       f"the server's port: {reach}", {**read, "run": r})

    def checkpoint_kept(self) -> Outcome:
        r = checkpoint_outlives_pods(self.kube, self.trained["name"], images.reference("torch-cpu", self.lock))
        return Outcome(f"TrainJob deleted; claim {r['claim']} kept; a fresh pod loaded the step-{r['step']} "
                       f"checkpoint: loss {r['trained_loss']:.4f} trained vs {r['untrained_loss']:.4f} untrained", r)
