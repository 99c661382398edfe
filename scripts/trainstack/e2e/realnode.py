"""The e2e checks only a real node can answer: a TrainJob that really trains, submitted as an ML
engineer does (the Kubeflow SDK), its checkpoint outliving its pods, and what a killed worker does.

`train_with_sdk` lists the runtimes and submits examples/train_ddp.py on `torch-distributed` with
two nodes through `TrainerClient().train(...)`, waits with `wait_for_job_status`, reads the loss
from `get_job_logs`, and checks both pods ran on the real node. `checkpoint_outlives_pods`
deletes the TrainJob and loads the checkpoint in a fresh pod that mounts the same claim.
`worker_killed` deletes a worker pod mid-run and follows the TrainJob to its end.
`RealNodeSteps` are the Suite's steps built on these (mixed into Suite).
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from .. import images, kubeapi, paths
from ..cluster import node as nodemod
from ..errors import UserError
from .base import GROUP, RELEASE, SMOKE_NS, VERSION, SuiteFailure
from .smokejobs import golden_runtimes
from .suitestate import SuiteState

RUNTIME = "torch-distributed"
NODES = 2
STEPS = 40
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
    from kubeflow.common.types import KubernetesBackendConfig
    from kubeflow.trainer import TrainerClient

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
    out = []
    for line in lines:
        try:
            record = json.loads(line.strip())
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("event") == kind:
            out.append(record)
    return out


def submit(kubeconfig: Path, train_args: list[str], cpu: str = "500m", memory: str = "1536Mi") -> str:
    sdk = _sdk_examples()
    args = sdk.parse_args(["--runtime", RUNTIME, "--num-nodes", str(NODES), "--cpu", cpu, "--memory", memory,
                           "--namespace", SMOKE_NS, "--", *train_args])
    return client(kubeconfig).train(runtime=RUNTIME, trainer=sdk.build_trainer(args))


def pods_of(kube: Any, name: str) -> list[dict[str, Any]]:
    api = kubeapi.for_kube(kube)
    return kubeapi.items(api, kubeapi.resource(api, "pods", SMOKE_NS), label_selector=f"jobset.sigs.k8s.io/jobset-name={name}")


def train_with_sdk(kube: Any, kubeconfig: Path, node_name: str, timeout: int = 300) -> dict[str, Any]:
    tc = client(kubeconfig)
    listed = sorted(r.name for r in tc.list_runtimes())
    if RUNTIME not in listed:
        raise RealNodeFailure(f"TrainerClient().list_runtimes() does not list {RUNTIME}: {', '.join(listed)}")
    name = submit(kubeconfig, ["--steps", str(STEPS), "--seed", "0", "--output-dir", OUTPUT])
    try:
        tc.wait_for_job_status(name, status={"Complete"}, timeout=timeout, polling_interval=2)
    except (RuntimeError, TimeoutError, ValueError) as err:
        raise RealNodeFailure(f"TrainJob {name} did not reach Complete: {str(err).splitlines()[0][:300]}") from None
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
    pods = pods_of(kube, name)
    on_node = [p for p in pods if p["spec"].get("nodeName") == node_name]
    succeeded = [p for p in on_node if p.get("status", {}).get("phase") == "Succeeded"]
    if len(succeeded) != NODES:
        where = {p["metadata"]["name"]: (p["spec"].get("nodeName"), p.get("status", {}).get("phase")) for p in pods}
        raise RealNodeFailure(f"TrainJob {name}: expected {NODES} pods Succeeded on {node_name}, got {where}")
    return {"name": name, "loss_first": loss[0], "loss_last": loss[-1], "pods": [p["metadata"]["name"] for p in pods],
            "runtimes": listed}


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


def checkpoint_outlives_pods(kube: Any, name: str, image: str, node_name: str, timeout: float = 120) -> dict[str, Any]:
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
         "spec": {"restartPolicy": "Never", "nodeSelector": {"kubernetes.io/hostname": node_name},
                  "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000,
                                      "seccompProfile": {"type": "RuntimeDefault"}},
                  "containers": [{"name": "check", "image": image, "command": ["python", "/scripts/check.py"],
                                  "securityContext": {"allowPrivilegeEscalation": False,
                                                      "capabilities": {"drop": ["ALL"]}},
                                  "resources": {"requests": {"cpu": "250m", "memory": "1Gi"},
                                                "limits": {"cpu": "500m", "memory": "1536Mi"}},
                                  "volumeMounts": [{"name": "scripts", "mountPath": "/scripts"},
                                                   {"name": "output", "mountPath": OUTPUT}]}],
                  "volumes": [{"name": "scripts", "configMap": {"name": pod}},
                              {"name": "output", "persistentVolumeClaim": {"claimName": claims[0]}}]}},
    ]
    kube.kubectl("apply", "-f", "-", input_text=yaml.safe_dump_all(objects))
    def ended(found: dict[str, dict[str, Any]]) -> str | None:
        phase = ((found.get(pod) or {}).get("status") or {}).get("phase")
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


def worker_killed(kube: Any, kubeconfig: Path, timeout: float = 300) -> dict[str, Any]:
    """Kill the rank-1 worker pod in the middle of a run and follow the TrainJob to its end.

    The job checkpoints every 10 steps and is started with --resume, so whatever restarts its
    pods (the Job's backoff, or JobSet's failure policy) continues from the last checkpoint.
    """
    # A step takes milliseconds here: many steps, so that the kill lands mid-run, after a checkpoint.
    steps, every = 4000, 50
    name = submit(kubeconfig, ["--steps", str(steps), "--seed", "1", "--output-dir", OUTPUT,
                               "--checkpoint-every", str(every), "--resume"])
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
        for cond in ((found.get(name) or {}).get("status") or {}).get("conditions") or []:
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
    kube.kubectl("delete", "trainjob", name, "-n", SMOKE_NS, "--wait=false", check=False)
    return result


# -- the Suite's steps on the real node -----------------------------------------------------------------


class RealNodeSteps(SuiteState):
    """The Suite's steps that need the real node (mixed into Suite: uses its kube, provider, rendered,
    lock, read and wait_trainjobs)."""

    def real_node_steps(self) -> list[tuple[str, Callable[[], str | None]]]:
        return [
            ("SDK TrainJob trains on 2 real pods", self.sdk_training),
            ("checkpoint outlives the pods", self.checkpoint_kept),
            ("worker killed mid-run", self.worker_killed),
            *([("SDK fine-tune (TorchTune) on the GPU pool", self.sdk_finetune)]
              if getattr(self.provider, "nodes", "") == "both" else []),
        ]

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
        jobs = sorted({(p["metadata"].get("labels") or {}).get("jobset.sigs.k8s.io/replicatedjob-name", "?")
                       for p in pods})
        off_gpu = [p["metadata"]["name"] for p in pods
                   if not any("gpu" in k for k in (nodes.get(p["spec"].get("nodeName") or "", {})
                                                   .get("status", {}).get("capacity") or {}))]
        if off_gpu:
            raise SuiteFailure(f"TorchTune TrainJob {name}: pods not on GPU nodes: {', '.join(off_gpu)}")
        return (f"BuiltinTrainer(TorchTuneConfig) on {runtime} -> {name} Complete (simulated on the KWOK GPU pool); "
                f"steps: {', '.join(jobs)}")

    def worker_killed(self) -> str:
        r = worker_killed(self.kube, self.provider.kubeconfig, timeout=self.provider.job_timeout)
        if r["state"] == "Complete":
            return (f"killed {r['killed']}: the job's pods restarted, resumed from the step-{r['resumed_from']} "
                    f"checkpoint and ended Complete {r['seconds_to_end']}s later")
        return f"killed {r['killed']}: TrainJob {r['name']} ended Failed {r['seconds_to_end']}s later ({r['message'][:160]})"

    def sdk_training(self) -> str:
        self.trained = train_with_sdk(self.kube, self.provider.kubeconfig, nodemod.NODE_NAME,
                                      timeout=int(self.provider.job_timeout))
        r = self.trained
        return (f"TrainerClient().train -> {r['name']} on {RELEASE}'s {RUNTIME}, {NODES} pods on "
                f"{nodemod.NODE_NAME}: loss {r['loss_first']:.4f} -> {r['loss_last']:.4f} "
                f"({STEPS} steps, read with get_job_logs); list_runtimes saw {len(r['runtimes'])} runtimes")

    def checkpoint_kept(self) -> str:
        r = checkpoint_outlives_pods(self.kube, self.trained["name"], images.reference("torch-cpu", self.lock),
                                     nodemod.NODE_NAME)
        return (f"TrainJob deleted; claim {r['claim']} kept; a fresh pod loaded the step-{r['step']} checkpoint: "
                f"loss {r['trained_loss']:.4f} trained vs {r['untrained_loss']:.4f} untrained")
