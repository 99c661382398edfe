"""An example Kubeflow Pipelines pipeline with trainstack's training step: data, train, evaluate.

    python examples/pipelines/train_pipeline.py compile -o train_pipeline.yaml   # KFP IR YAML
    python examples/pipelines/train_pipeline.py run --kubeconfig KUBECONFIG --namespace team-a

1. `make_dataset` writes a small synthetic held-out dataset, drawn from the same teacher function
   train_ddp.py learns (examples/train_ddp.py's own `teacher` and `batch`, at a step training never
   draws), as a Dataset artifact.
2. `run_trainjob` (trainjob_component.py) trains examples/train_ddp.py on `torch-distributed` with
   2 nodes as a TrainJob and outputs the TrainJob's name and the output volume's claim and path.
3. `evaluate` reads the checkpoint from that volume, rebuilds the model with train_ddp.py's own
   `load_checkpoint`, computes its loss on the held-out dataset and reports it as the pipeline
   metric `final_loss`. Where the step has the volume mounted at the same path (a KFP backend with
   the claim mounted into the step) it reads the file directly; otherwise it reads it through a
   short-lived pod in the team's namespace that mounts the claim read-only.

With `model_name` (and the chart's tracking on for the namespace: train_ddp.py then logs its run),
the training step registers the TrainJob's run's checkpoint as a new version of that model in
MLflow's registry, and `evaluate` reads the checkpoint back by that name and version through the
tracking server (`tracking_uri`, or MLFLOW_TRACKING_URI; the credential from MLFLOW_TRACKING_USERNAME
and _PASSWORD or the namespace's trainstack-tracking Secret) instead of from the volume.

`run` executes the pipeline with kfp's local runner (`kfp.local`, subprocess mode) on this machine
against the cluster in KUBECONFIG: every step runs here as a process of this Python environment,
the TrainJob runs on the cluster. `run_local()` is the same as a function.
"""

# No `from __future__ import annotations`: kfp reads the parameter types from real annotations.
import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import NamedTuple

from kfp import compiler, dsl
from kfp.dsl import Dataset, Input, Metrics, Output

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from trainjob_component import KUBEFLOW_REQUIREMENT, STEP_IMAGE, run_trainjob

TRAIN_SCRIPT = HERE.parent / "train_ddp.py"
TRACKING_HELPER = HERE.parent / "trainstack_tracking.py"  # train_ddp.py logs its MLflow run with it
PIPELINE_NAME = "trainstack-train-evaluate"
CHECKPOINT_NAME = "checkpoint.pt"  # what train_ddp.py writes into its output directory


@dsl.component(base_image=STEP_IMAGE)
def make_dataset(script: str, seed: int, features: int, samples: int, dataset: Output[Dataset]):
    """A synthetic held-out set: train_ddp.py's teacher, at step 0 (training draws steps 1..N)."""
    import importlib.util
    import os
    import tempfile
    import warnings

    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")  # torch without numpy
    import torch

    path = os.path.join(tempfile.mkdtemp(prefix="train-ddp-"), "train_ddp.py")
    with open(path, "w") as handle:
        handle.write(script)
    spec = importlib.util.spec_from_file_location("train_ddp", path)
    train_ddp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train_ddp)

    weights = train_ddp.teacher(seed, features)
    x, y = train_ddp.batch(seed, 0, 0, 1, samples, features, weights)
    torch.save({"x": x, "y": y, "seed": seed, "features": features}, dataset.path)
    dataset.metadata.update({"samples": samples, "features": features, "seed": seed})
    print(f"dataset: {samples} samples, {features} features, seed {seed} -> {dataset.path}", flush=True)


@dsl.component(base_image=STEP_IMAGE, packages_to_install=[KUBEFLOW_REQUIREMENT])
def evaluate(script: str, namespace: str, trainjob: str, output_claim: str, output_mount_path: str,
             dataset: Input[Dataset], metrics: Output[Metrics], checkpoint_name: str = "checkpoint.pt",
             timeout_seconds: int = 600, model_name: str = "", model_version: str = "",
             tracking_uri: str = "") -> NamedTuple("Outputs", [("final_loss", float)]):
    """Load the TrainJob's checkpoint (from MLflow's model registry when model_name is given, else from
    its output volume) and report its loss on the dataset."""
    import base64
    import contextlib
    import hashlib
    import importlib.util
    import json
    import os
    import sys
    import tempfile
    import time
    import urllib.error
    import urllib.parse
    import urllib.request
    import warnings
    from collections import namedtuple

    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")  # torch without numpy
    import torch

    def fail(message: str) -> None:
        print(f"error: {message}".replace("\n", " "), file=sys.stderr, flush=True)
        raise SystemExit(1)

    def kubernetes_api():
        from kubernetes import client, config

        try:
            if os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG"):
                config.load_incluster_config()
            else:
                config.load_kube_config()
        except Exception as err:  # noqa: BLE001
            fail(f"evaluate: cannot reach the Kubernetes API: {type(err).__name__}: {err}")
        return client.CoreV1Api(), client.CustomObjectsApi()

    def reason(err: BaseException) -> str:
        body = getattr(err, "body", None)
        try:
            return f"{err.status} {json.loads(body)['message']}"
        except (TypeError, ValueError, KeyError, AttributeError):
            return f"{type(err).__name__}: {err}"

    where = f"{namespace}/{trainjob}"
    local = os.path.join(output_mount_path, checkpoint_name) if output_mount_path else ""
    if model_name:  # by registry name and version, through the tracking server (it serves the artifacts)
        uri = (tracking_uri or os.environ.get("MLFLOW_TRACKING_URI", "")).rstrip("/")
        model = f"models:/{model_name}/{model_version}"
        if not uri.startswith(("http://", "https://")) or not model_version:
            fail(f"evaluate: reading {model} needs tracking_uri (or MLFLOW_TRACKING_URI) and a model_version")
        user, password = os.environ.get("MLFLOW_TRACKING_USERNAME", ""), os.environ.get("MLFLOW_TRACKING_PASSWORD", "")
        if not user:
            try:
                data = kubernetes_api()[0].read_namespaced_secret("trainstack-tracking", namespace).data or {}
            except Exception as err:  # noqa: BLE001
                fail(f"evaluate: no MLFLOW_TRACKING_USERNAME, and Secret {namespace}/trainstack-tracking is not "
                     f"readable: {reason(err)}")
            user, password = (base64.b64decode(data.get(k, "")).decode() for k in ("username", "password"))
        auth = {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}

        def get(path: str) -> bytes:
            try:
                with urllib.request.urlopen(urllib.request.Request(f"{uri}/{path}", headers=auth), timeout=60) as r:
                    return r.read()
            except urllib.error.HTTPError as err:
                fail(f"evaluate: reading {model} from MLflow at {uri}: {err.code} {err.read()[:200].decode(errors='replace')}")
            except (urllib.error.URLError, OSError) as err:
                fail(f"evaluate: MLflow at {uri} does not answer ({getattr(err, 'reason', err)})")

        query = f"name={urllib.parse.quote(model_name)}&version={urllib.parse.quote(model_version)}"
        version = json.loads(get(f"api/2.0/mlflow/model-versions/get?{query}"))["model_version"]
        if version.get("status") != "READY":
            fail(f"evaluate: {model} is {version.get('status')}, not READY")
        located = json.loads(get(f"api/2.0/mlflow/model-versions/get-download-uri?{query}"))["artifact_uri"]
        if not located.startswith("mlflow-artifacts:/"):
            fail(f"evaluate: {model} lives at {located}, not in the tracking server's proxied artifacts")
        data = get(f"api/2.0/mlflow-artifacts/artifacts/{located.removeprefix('mlflow-artifacts:/').strip('/')}/"
                   f"{checkpoint_name}")
        checkpoint = os.path.join(tempfile.mkdtemp(prefix="checkpoint-"), checkpoint_name)
        with open(checkpoint, "wb") as handle:
            handle.write(data)
        source = f"{model} (run {version.get('run_id', '')}, {len(data)} bytes from {uri})"
    elif not output_claim or not output_mount_path:
        fail(f"evaluate: TrainJob {where} has no output volume, so there is no checkpoint to read")
    elif os.path.isfile(local):  # the claim is mounted into this step at the same path
        checkpoint, source = local, f"{local} (mounted)"
    else:
        core, custom = kubernetes_api()

        # The reader runs the TrainJob's own image and node placement, so it lands where the claim can be mounted.
        try:
            job = custom.get_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", namespace, "trainjobs",
                                                      trainjob)
            ref = job["spec"]["runtimeRef"]
            if ref.get("kind") == "TrainingRuntime":
                rt = custom.get_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", namespace,
                                                         "trainingruntimes", ref["name"])
            else:
                rt = custom.get_cluster_custom_object("trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes",
                                                      ref["name"])
        except Exception as err:  # noqa: BLE001
            fail(f"evaluate: cannot read TrainJob {where} and its runtime: {reason(err)}")
        node = next(j for j in rt["spec"]["template"]["spec"]["replicatedJobs"] if j["name"] == "node")
        pod_spec = node["template"]["spec"]["template"]["spec"]
        image = (job["spec"].get("trainer") or {}).get("image") or pod_spec["containers"][0]["image"]
        read = ("import base64, hashlib, sys; data = open(sys.argv[1], 'rb').read(); "
                "print(hashlib.sha256(data).hexdigest(), len(data)); print(base64.encodebytes(data).decode(), end='')")
        limits = {"cpu": "100m", "memory": "256Mi"}
        pod = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": f"{trainjob}-read-", "namespace": namespace,
                         "labels": {"trainstack.io/reads-output-of": trainjob}},
            "spec": {
                "restartPolicy": "Never",
                "securityContext": pod_spec.get("securityContext") or {
                    "runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
                **{k: pod_spec[k] for k in ("nodeSelector", "tolerations", "affinity", "imagePullSecrets")
                   if pod_spec.get(k)},
                "containers": [{
                    "name": "read", "image": image,
                    "command": ["python3", "-c", read, os.path.join(output_mount_path, checkpoint_name)],
                    "resources": {"requests": limits, "limits": limits},
                    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                    "volumeMounts": [{"name": "output", "mountPath": output_mount_path, "readOnly": True}],
                }],
                "volumes": [{"name": "output", "persistentVolumeClaim": {"claimName": output_claim,
                                                                         "readOnly": True}}],
            },
        }
        try:
            name = core.create_namespaced_pod(namespace, pod).metadata.name
        except Exception as err:  # noqa: BLE001
            fail(f"evaluate: cannot start a pod in {namespace} to read volume {output_claim}: {reason(err)}")
        try:
            deadline = time.monotonic() + timeout_seconds
            phase = "Pending"
            while time.monotonic() < deadline:
                phase = core.read_namespaced_pod(name, namespace).status.phase
                if phase in ("Succeeded", "Failed"):
                    break
                time.sleep(2)
            log = core.read_namespaced_pod_log(name, namespace, container="read") if phase != "Pending" else ""
            if phase != "Succeeded":
                tail = " | ".join(log.strip().splitlines()[-3:])
                fail(f"evaluate: pod {namespace}/{name} could not read {checkpoint_name} from volume {output_claim} "
                     f"of TrainJob {where} (phase {phase}" + (f": {tail}" if tail else "") + ")")
            lines = log.strip().splitlines()
            header = lines[0].split() if lines else []
            if len(header) != 2 or not header[1].isdigit():
                fail(f"evaluate: pod {namespace}/{name} printed no checkpoint (its log has {len(lines)} lines; "
                     "pods on simulated nodes run nothing)")
            digest, size = header
            data = base64.b64decode("".join(lines[1:]))  # 76-character lines: no log line gets split
            if hashlib.sha256(data).hexdigest() != digest or len(data) != int(size):
                fail(f"evaluate: the checkpoint read from volume {output_claim} is damaged "
                     f"({len(data)} of {size} bytes arrived)")
        finally:
            # the pod is gone already or will be garbage anyway
            with contextlib.suppress(Exception):
                core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        checkpoint = os.path.join(tempfile.mkdtemp(prefix="checkpoint-"), checkpoint_name)
        with open(checkpoint, "wb") as handle:
            handle.write(data)
        source = f"pvc {namespace}/{output_claim}:{output_mount_path}/{checkpoint_name} (through pod {name})"

    path = os.path.join(tempfile.mkdtemp(prefix="train-ddp-"), "train_ddp.py")
    with open(path, "w") as handle:
        handle.write(script)
    spec = importlib.util.spec_from_file_location("train_ddp", path)
    train_ddp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train_ddp)

    state = train_ddp.load_checkpoint(checkpoint)
    held_out = torch.load(dataset.path, weights_only=True)
    if held_out["features"] != state["config"]["features"]:
        fail(f"evaluate: the dataset has {held_out['features']} features, the model of TrainJob {where} "
             f"{state['config']['features']}")
    with torch.no_grad():
        loss = torch.nn.functional.mse_loss(state["module"](held_out["x"]), held_out["y"]).item()
    metrics.log_metric("final_loss", loss)
    metrics.log_metric("checkpoint_step", int(state["step"]))
    metrics.log_metric("world_size", int(state["world_size"]))
    if model_name:
        metrics.log_metric("model_version", int(model_version))
    print(json.dumps({"event": "evaluated", "trainjob": trainjob, "final_loss": loss, "step": int(state["step"]),
                      "world_size": int(state["world_size"]), "checkpoint": source}), flush=True)
    return namedtuple("Outputs", ["final_loss"])(loss)


@dsl.pipeline(name=PIPELINE_NAME,
              description="Synthetic data, torch DDP training as a Kubeflow TrainJob on trainstack, evaluation.")
def train_evaluate(namespace: str, runtime: str = "torch-distributed", num_nodes: int = 2,
                   resources_per_node: dict = {}, queue: str = "", steps: int = 60, seed: int = 0,
                   features: int = 16, samples: int = 512, timeout_seconds: int = 3600, model_name: str = "",
                   tracking_uri: str = "") -> Metrics:
    # train_ddp.py's text goes to each step as a constant (not a pipeline parameter: kfp writes a
    # parameter's default into the IR's header comment, and a multi-line one breaks the YAML).
    script = TRAIN_SCRIPT.read_text()
    data = make_dataset(script=script, seed=seed, features=features, samples=samples)
    data.set_display_name("synthetic dataset").set_caching_options(True)
    data.set_retry(num_retries=2, backoff_duration="10s", backoff_factor=2.0)

    train = run_trainjob(namespace=namespace, runtime=runtime, num_nodes=num_nodes,
                         resources_per_node=resources_per_node, queue=queue, script=script,
                         files={TRACKING_HELPER.name: TRACKING_HELPER.read_text()},
                         script_args=["--steps", steps, "--seed", seed, "--features", features],
                         timeout_seconds=timeout_seconds, register_model=model_name, tracking_uri=tracking_uri)
    # A cached or retried training step would reuse or repeat a whole TrainJob: neither, ever.
    # Restarts of failed pods are the TrainJob's own business (its runtime's failure policy).
    train.set_display_name("train (TrainJob)").set_caching_options(False).after(data)

    scored = evaluate(script=script, namespace=namespace, trainjob=train.outputs["trainjob"],
                      output_claim=train.outputs["output_claim"],
                      output_mount_path=train.outputs["output_mount_path"], dataset=data.outputs["dataset"],
                      model_name=model_name, model_version=train.outputs["model_version"],
                      tracking_uri=tracking_uri)
    # It reads a volume that outlives the run, so its result is not cached; a pod it starts may be retried.
    scored.set_display_name("evaluate checkpoint").set_caching_options(False)
    scored.set_retry(num_retries=2, backoff_duration="10s", backoff_factor=2.0)
    return scored.outputs["metrics"]


RBAC = HERE / "rbac.yaml"
RBAC_EXAMPLE_NAMESPACE = "team-a"


def rbac_manifests(namespace: str, steps: tuple[str, ...] = ("train", "evaluate")) -> list[dict]:
    """rbac.yaml for `namespace`: the ServiceAccount, the Roles of `steps` and their bindings."""
    import yaml

    docs = [d for d in yaml.safe_load_all(RBAC.read_text()) if d]
    wanted = {f"trainstack-pipeline-{step}" for step in steps}
    out = []
    for doc in docs:
        meta = doc["metadata"]
        if doc["kind"] in ("Role", "RoleBinding") and meta["name"] not in wanted:
            continue
        if meta.get("namespace") == RBAC_EXAMPLE_NAMESPACE:
            meta["namespace"] = namespace
        if doc["kind"] == "ClusterRoleBinding":
            meta["name"] = meta["name"].removesuffix(RBAC_EXAMPLE_NAMESPACE) + namespace
        for subject in doc.get("subjects", []):
            subject["namespace"] = namespace
        out.append(doc)
    return out


def compile_pipeline(path: Path) -> Path:
    """Write the pipeline's Kubeflow Pipelines IR YAML to `path`."""
    compiler.Compiler().compile(train_evaluate, str(path))
    return path


class PipelineFailed(Exception):
    """A step of a local run failed; the message is the step's own one-line reason."""


class _Tee(io.TextIOBase):
    """Passes kfp.local's output through and keeps it, to find the failing step's error line."""

    def __init__(self, stream) -> None:
        self.stream, self.lines = stream, []

    def write(self, text: str) -> int:
        self.stream.write(text)
        self.lines.extend(text.splitlines())
        return len(text)

    def flush(self) -> None:
        self.stream.flush()


def _run_with_kfp_local(kubeconfig: str | os.PathLike, workdir: str | os.PathLike | None, run) -> tuple:
    """Call `run()` (a pipeline or a component) under kfp.local's subprocess runner; (result, root, seconds)."""
    from kfp import local

    kubeconfig = Path(kubeconfig).resolve()
    if not kubeconfig.is_file():
        raise PipelineFailed(f"kubeconfig {kubeconfig} does not exist")
    root = Path(workdir or tempfile.mkdtemp(prefix="trainstack-pipeline-")).resolve()
    previous = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = str(kubeconfig)  # the steps are subprocesses: they inherit it
    tee = _Tee(sys.stdout)
    started = time.monotonic()
    try:
        local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(root / "root"),
                   workspace_root=str(root / "workspace"), raise_on_error=True)
        with contextlib.redirect_stdout(tee), warnings.catch_warnings():
            # kfp warns that the torch image's name does not say "python"; the steps run in this Python.
            warnings.filterwarnings("ignore", message=".*non-Python base image.*")
            result = run()
    except RuntimeError as err:  # kfp.local: "Task '...' finished with status FAILURE"
        errors = [ln.strip() for ln in tee.lines if ln.strip().startswith("error: ")]
        raise PipelineFailed(errors[-1][len("error: "):] if errors else str(err).strip().splitlines()[-1]) from None
    finally:
        if previous is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = previous
    return result, root, round(time.monotonic() - started, 1)


def run_local(kubeconfig: str | os.PathLike, namespace: str, *, workdir: str | os.PathLike | None = None,
              **parameters) -> dict:
    """Run the whole pipeline with kfp.local (subprocess runner, this Python environment) against a cluster.

    kubeconfig: the cluster's kubeconfig (e.g. the one `trainstack e2e --keep` prints); namespace:
    where the TrainJob runs (its ServiceAccount or user needs examples/pipelines/rbac.yaml's rights);
    parameters: the pipeline's other inputs (runtime, num_nodes, steps, seed, queue, ...).
    Returns {"trainjob", "final_loss", "metrics", "seconds", "pipeline_root"}; raises PipelineFailed
    with the failing step's one-line reason.
    """
    task, root, seconds = _run_with_kfp_local(kubeconfig, workdir,
                                              lambda: train_evaluate(namespace=namespace, **parameters))
    found = dict(task.outputs["Output"].metadata)  # the pipeline's one output: evaluate's Metrics
    return {"final_loss": found.get("final_loss"), "metrics": found, "trainjob": _trainjob_of(root),
            "seconds": seconds, "pipeline_root": str(root / "root")}


def run_training_step(kubeconfig: str | os.PathLike, namespace: str, *, workdir: str | os.PathLike | None = None,
                      **inputs) -> dict:
    """Run only the training step (run_trainjob) with kfp.local against a cluster; its outputs and seconds.

    For clusters whose pods do not really run (KWOK nodes): submit, wait and the failure reason are
    what this exercises there. Raises PipelineFailed with the step's one-line reason.
    """
    task, _root, seconds = _run_with_kfp_local(kubeconfig, workdir,
                                               lambda: run_trainjob(namespace=namespace, **inputs))
    return {**task.outputs, "seconds": seconds}


def _trainjob_of(root: Path) -> str:
    """The TrainJob name the training step output, from kfp.local's executor output files."""
    for output in sorted((root / "root").rglob("executor_output.json")):
        params = json.loads(output.read_text()).get("parameterValues", {})
        if "trainjob" in params:
            return params["trainjob"]
    return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="trainstack's example pipeline: data, TrainJob, evaluation.")
    sub = parser.add_subparsers(dest="command", required=True)
    comp = sub.add_parser("compile", help="write the Kubeflow Pipelines IR YAML")
    comp.add_argument("-o", "--output", type=Path, default=Path("train_pipeline.yaml"))
    run = sub.add_parser("run", help="run it with kfp.local against the cluster in --kubeconfig")
    run.add_argument("--kubeconfig", required=True)
    run.add_argument("--namespace", required=True)
    run.add_argument("--runtime", default="torch-distributed")
    run.add_argument("--num-nodes", type=int, default=2)
    run.add_argument("--steps", type=int, default=60)
    run.add_argument("--queue", default="")
    run.add_argument("--model-name", default="", help="register the checkpoint in MLflow under this name; evaluate "
                     "reads it back from there")
    run.add_argument("--tracking-uri", default="", help="the MLflow tracking server (default: MLFLOW_TRACKING_URI)")
    run.add_argument("--workdir", help="where kfp.local keeps the run's artifacts (default: a temporary folder)")
    run.add_argument("--output", choices=["text", "json"], default="text")
    rbac = sub.add_parser("rbac", help="print rbac.yaml for a namespace (kubectl apply -f -)")
    rbac.add_argument("--namespace", required=True)
    args = parser.parse_args(argv)
    if args.command == "compile":
        print(compile_pipeline(args.output))
        return 0
    if args.command == "rbac":
        import yaml

        print(yaml.safe_dump_all(rbac_manifests(args.namespace), sort_keys=False), end="")
        return 0
    try:
        result = run_local(args.kubeconfig, args.namespace, workdir=args.workdir, runtime=args.runtime,
                           num_nodes=args.num_nodes, steps=args.steps, queue=args.queue, model_name=args.model_name,
                           tracking_uri=args.tracking_uri)
    except PipelineFailed as err:
        print(f"error: pipeline {PIPELINE_NAME}: {err}", file=sys.stderr)
        return 1
    print(json.dumps(result, sort_keys=True) if args.output == "json" else
          f"TrainJob {result['trainjob']}: final_loss {result['final_loss']:.6f} ({result['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
