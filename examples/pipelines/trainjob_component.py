"""The training step of a Kubeflow Pipelines pipeline: run a TrainJob on trainstack and wait for it.

    from trainjob_component import run_trainjob

    train = run_trainjob(namespace="team-a", runtime="torch-distributed", num_nodes=2,
                         resources_per_node={"cpu": "1", "memory": "2Gi"},
                         script=Path("train.py").read_text(), script_args=["--steps", "60"])
    evaluate(trainjob=train.outputs["trainjob"], output_claim=train.outputs["output_claim"], ...)

`run_trainjob` is a lightweight Python component (kfp): Kubeflow Pipelines ships the function's
source into the step's container and runs it there, so everything it does is inside the
function. It submits the TrainJob with the Kubeflow SDK's TrainerClient, prints the rank-0 logs
(node-0) into the step's log as they come, waits until the TrainJob is Complete or Failed, and
fails the step with one line naming the TrainJob and the reason when it does not complete. Its
outputs are the TrainJob's name and where the checkpoint lives: the golden runtime's output
volume (the PersistentVolumeClaim and the path it is mounted at in the `node` containers).

The step's image and the Kubeflow SDK it installs come from trainstack.lock.yaml: the locked torch
image (the same image the torch runtimes run, so a mirrored cluster already has it) and the
lock's `python.train.kubeflow` bound. The step runs as its namespace's pipeline ServiceAccount;
examples/pipelines/rbac.yaml is exactly what it needs.
"""

# No `from __future__ import annotations`: kfp reads the parameter types from real annotations.
import sys
from pathlib import Path
from typing import NamedTuple

from kfp import dsl

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

from trainstack import lock as _lock

_LOCK = _lock.load(ROOT / "trainstack.lock.yaml")
# The image every step of the example runs in: the locked torch image (python, pip and torch).
STEP_IMAGE = _LOCK.image("torch").reference()
# The Kubeflow SDK the training step installs (kfp installs it at step start).
KUBEFLOW_REQUIREMENT = f"kubeflow{_LOCK.get('python', 'train', 'kubeflow')}"


@dsl.component(base_image=STEP_IMAGE, packages_to_install=[KUBEFLOW_REQUIREMENT])
def run_trainjob(
    namespace: str,
    runtime: str = "torch-distributed",
    num_nodes: int = 2,
    resources_per_node: dict = {},
    script: str = "",
    script_args: list = [],
    files: dict = {},
    command: list = [],
    image: str = "",
    queue: str = "",
    env: dict = {},
    timeout_seconds: int = 3600,
    stream_logs: bool = True,
    require_output_volume: bool = True,
    register_model: str = "",
    tracking_uri: str = "",
) -> NamedTuple("Outputs", [("trainjob", str), ("output_claim", str), ("output_mount_path", str),
                            ("model_version", str)]):
    """Run a TrainJob on a trainstack runtime; wait for it; output its name and checkpoint location.

    Args:
        namespace: the team's namespace; the TrainJob is created there.
        runtime: a (Cluster)TrainingRuntime name, e.g. torch-distributed.
        num_nodes: training nodes (spec.trainer.numNodes).
        resources_per_node: e.g. {"cpu": "1", "memory": "2Gi", "gpu": 1}; quantities as strings.
        script: text of a Python training script, run under the runtime's launcher (torchrun) on
            every node; free of $, backquotes and backslashes (the SDK ships it in a shell
            here-document).
        script_args: arguments for the script.
        files: more files written beside the script (file name: text), which it may import; the
            example's trainstack_tracking.py, for instance. The same rule for shell-special characters.
        command: instead of a script, the trainer container's command (runs in `image`, default the
            runtime's image).
        image: trainer image (default: the runtime's).
        queue: the team's Kueue LocalQueue (label kueue.x-k8s.io/queue-name); empty: none.
        env: environment of the training containers.
        timeout_seconds: how long to wait for the TrainJob to finish.
        stream_logs: print node-0's log into this step's log while it runs.
        require_output_volume: fail before submitting when the runtime mounts no output volume
            (a checkpoint would then not outlive the pods).
        register_model: a model name in MLflow's registry: once the TrainJob is Complete, its run
            (experiment: the namespace; run name: the TrainJob's, as the golden runtimes set them when
            the chart's tracking is on) gets a new version of this model made from its `checkpoint`
            artifacts. Empty: nothing is registered.
        tracking_uri: the MLflow tracking server, for register_model (default: MLFLOW_TRACKING_URI).
            The credential is MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, else the
            namespace's trainstack-tracking Secret (the chart's tracking makes it).

    Returns:
        trainjob: the TrainJob's name; output_claim: the PersistentVolumeClaim of the output volume;
        output_mount_path: where the volume is mounted in the node containers (the checkpoint
        directory; train_ddp.py writes checkpoint.pt there); model_version: the version registered
        under register_model ("" when none).
    """
    import base64
    import json
    import os
    import re
    import sys
    import time
    import urllib.error
    import urllib.parse
    import urllib.request
    from collections import namedtuple

    def fail(message: str) -> None:
        print(f"error: {message}".replace("\n", " "), file=sys.stderr, flush=True)
        raise SystemExit(1)

    def api_reason(err: BaseException) -> str:
        """The API server's message for a failed request, from the exception or its cause."""
        for candidate in (err, err.__cause__, err.__context__):
            if type(candidate).__name__ == "MaxRetryError":  # urllib3: nothing answered
                return f"the API server does not answer ({candidate.reason})"
            status = getattr(candidate, "status", None)
            body = getattr(candidate, "body", None)
            if status is None:
                continue
            message = getattr(candidate, "reason", "") or ""
            if body:
                try:
                    message = json.loads(body).get("message", message)
                except (ValueError, AttributeError):
                    message = str(body)
            return f"{status} {message}".strip()
        return f"{type(err).__name__}: {err}"

    def api_status(err: BaseException):
        for candidate in (err, err.__cause__, err.__context__):
            if getattr(candidate, "status", None) is not None:
                return candidate.status
        return None

    # ---- the inputs -------------------------------------------------------------------------
    if not namespace:
        fail("run_trainjob: namespace is required (the team's namespace)")
    if num_nodes < 1:
        fail(f"run_trainjob: num_nodes must be at least 1, got {num_nodes}")
    if timeout_seconds < 10:
        fail(f"run_trainjob: timeout_seconds must be at least 10, got {timeout_seconds}")
    if bool(script) == bool(command):
        fail("run_trainjob: give exactly one of script (a Python training script's text) and command")
    tracking_uri = (tracking_uri or os.environ.get("MLFLOW_TRACKING_URI", "")).rstrip("/")
    if register_model and not tracking_uri.startswith(("http://", "https://")):
        fail(f"run_trainjob: register_model {register_model!r} needs tracking_uri (or MLFLOW_TRACKING_URI), an "
             f"http(s) address of the MLflow tracking server, not {tracking_uri!r}")
    # An int pipeline parameter placed in script_args reaches the step as "40.0" under kfp.local
    # (numbers travel as floats), which argparse's type=int refuses: a whole number written N.0
    # becomes N (the same number to a float argument).
    argv = [a[:-2] if re.fullmatch(r"-?\d+\.0", a) else a
            for a in (str(int(v)) if isinstance(v, float) and v.is_integer() else str(v) for v in script_args)]
    special = [c for c in ("$", "`", "\\") if c in script or any(c in a for a in argv)
               or any(c in str(t) for t in files.values())]
    if special:
        fail(f"run_trainjob: script, script_args and files must not contain {' '.join(special)} (the Kubeflow "
             "SDK ships them in a shell here-document, which would change them)")
    bad_names = [n for n in files if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", str(n)) or n == "train.py"]
    if bad_names:
        fail(f"run_trainjob: files: {bad_names[0]!r} is not a plain file name other than train.py")
    resources = {str(k): str(v) for k, v in resources_per_node.items()}

    try:
        from kubeflow.common.types import KubernetesBackendConfig
        from kubeflow.trainer import CustomTrainer, CustomTrainerContainer, TrainerClient
        from kubeflow.trainer.options import Labels, TrainerCommand
    except ImportError as err:
        fail(f"run_trainjob: the Kubeflow SDK is not installed in this step's image ({err})")

    try:
        client = TrainerClient(backend_config=KubernetesBackendConfig(namespace=namespace))
    except Exception as err:  # noqa: BLE001 - no kubeconfig, no in-cluster config
        fail(f"run_trainjob: cannot reach the Kubernetes API: {type(err).__name__}: {err}")
    custom = client.backend.custom_api
    group, version = "trainer.kubeflow.org", "v1alpha1"

    # ---- the runtime, and where its output volume is ----------------------------------------
    runtime_cr = None
    try:
        runtime_cr = custom.get_namespaced_custom_object(group, version, namespace, "trainingruntimes", runtime)
    except Exception as err:  # noqa: BLE001
        if api_status(err) == 403:
            fail(f"run_trainjob: namespace {namespace}: this step may not read TrainingRuntimes there "
                 f"({api_reason(err)}); run the step as the namespace's pipeline ServiceAccount")
        if api_status(err) != 404:
            fail(f"run_trainjob: cannot read TrainingRuntime {namespace}/{runtime}: {api_reason(err)}")
    if runtime_cr is None:
        try:
            runtime_cr = custom.get_cluster_custom_object(group, version, "clustertrainingruntimes", runtime)
        except Exception as err:  # noqa: BLE001
            if api_status(err) != 404:
                fail(f"run_trainjob: cannot read ClusterTrainingRuntime {runtime}: {api_reason(err)}")
            try:
                names = sorted(r.name for r in client.list_runtimes())
            except Exception:  # noqa: BLE001
                names = []
            fail(f"run_trainjob: runtime {runtime!r} does not exist in namespace {namespace} or cluster-wide "
                 f"(runtimes: {', '.join(names) or 'none readable'})")

    pod_spec, node_container = {}, {}
    for job in runtime_cr.get("spec", {}).get("template", {}).get("spec", {}).get("replicatedJobs", []):
        if job.get("name") == "node":
            pod_spec = job.get("template", {}).get("spec", {}).get("template", {}).get("spec", {})
            node_container = next((c for c in pod_spec.get("containers", []) if c.get("name") == "node"), {})
    mount = next((m for m in node_container.get("volumeMounts", []) if m.get("name") == "output"), None)
    claim_template, claim = None, ""
    if mount:
        volume = next((v for v in pod_spec.get("volumes", []) if v.get("name") == "output"), None)
        if volume and volume.get("persistentVolumeClaim"):
            claim = volume["persistentVolumeClaim"]["claimName"]
        for policy in runtime_cr["spec"]["template"]["spec"].get("volumeClaimPolicies", []) or []:
            for template in policy.get("templates", []):
                if template.get("metadata", {}).get("name") == "output":
                    claim_template = "output"
    if require_output_volume and not (mount and (claim or claim_template)):
        fail(f"run_trainjob: runtime {runtime} mounts no output volume, so a checkpoint would not outlive the "
             "pods: turn on runtimes.defaults.output.enabled (or the runtime's own output) in the environment's "
             "values, or pass require_output_volume=False")

    # ---- submit -----------------------------------------------------------------------------
    def run_script(source: str, argv: list, files: dict) -> None:
        """Runs in each training process: write the script and FILES to a folder and run the script as
        __main__ with that folder first on the import path, as python would run it (no dollar, backquote
        or backslash here: the SDK ships this function's source in a shell here-document)."""
        import os
        import runpy
        import sys
        import tempfile

        folder = tempfile.mkdtemp(prefix="pipeline-step-")
        for name, text in {**files, "train.py": source}.items():
            with open(os.path.join(folder, name), "w") as handle:
                handle.write(text)
        path = os.path.join(folder, "train.py")
        sys.argv = [path, *argv]
        sys.path.insert(0, folder)
        runpy.run_path(path, run_name="__main__")

    options = [Labels({"kueue.x-k8s.io/queue-name": queue})] if queue else []
    if script:
        trainer = CustomTrainer(func=run_script, func_args={"source": script, "argv": argv,
                                                            "files": {str(k): str(v) for k, v in files.items()}},
                                num_nodes=num_nodes, resources_per_node=resources or None, image=image or None,
                                env={str(k): str(v) for k, v in env.items()} or None)
    else:
        trainer = CustomTrainerContainer(image=image or node_container.get("image", ""), num_nodes=num_nodes,
                                         resources_per_node=resources or None,
                                         env={str(k): str(v) for k, v in env.items()} or None)
        options.append(TrainerCommand(command=[str(c) for c in command]))
    try:
        name = client.train(runtime=runtime, trainer=trainer, options=options or None)
    except Exception as err:  # noqa: BLE001 - the SDK wraps the API server's answer in RuntimeError
        if api_status(err) == 403 and "cannot create resource" in api_reason(err):  # RBAC, not admission
            fail(f"run_trainjob: namespace {namespace}: this step may not create TrainJobs there ({api_reason(err)})")
        # admission (a trainstack policy, the Trainer webhook) or the CRD's schema said no: its message says why
        fail(f"run_trainjob: the TrainJob was not created in {namespace} on runtime {runtime}: {api_reason(err)}")
    where = f"{namespace}/{name}"
    claim = claim or (f"{claim_template}-{name}" if claim_template else "")  # JobSet names it <template>-<jobset>
    print(f"TrainJob {where} created: runtime {runtime}, {num_nodes} node(s)"
          + (f", queue {queue}" if queue else "") + (f", output volume {claim}" if claim else ""), flush=True)

    # ---- node-0's log, then the terminal state ----------------------------------------------
    deadline = time.monotonic() + timeout_seconds
    terminal = {"Complete", "Failed"}

    def status_of():
        try:
            return client.get_job(name)
        except Exception as err:  # noqa: BLE001
            fail(f"TrainJob {where}: cannot read it: {api_reason(err)}")

    def last_event() -> str:
        """The TrainJob's (and its JobSet's, Jobs', pods') latest event: why it is stuck, e.g. FailedScheduling."""
        try:
            events = client.get_job_events(name)
        except Exception:  # noqa: BLE001 - only a hint for the error line
            return ""
        if not events:
            return ""
        e = events[-1]
        return f"; last event: {e.involved_object_kind} {e.involved_object_name}: {e.reason}: {e.message}"

    job = status_of()
    if stream_logs:
        while job.status not in terminal and time.monotonic() < deadline:
            node0 = next((s for s in job.steps if s.name == "node-0"), None)
            if node0 is not None and node0.status != "Pending":
                break
            time.sleep(2)
            job = status_of()
        try:
            for line in client.get_job_logs(name, step="node-0", follow=job.status not in terminal):
                print(f"[{name} node-0] {line}", flush=True)
        except Exception as err:  # noqa: BLE001 - logs are a convenience; the state decides
            print(f"(node-0's log is not readable: {api_reason(err)})", flush=True)

    remaining = int(deadline - time.monotonic())
    if job.status not in terminal:
        if remaining < 3:
            fail(f"TrainJob {where} did not finish within {timeout_seconds}s (status {job.status}){last_event()}")
        try:
            job = client.wait_for_job_status(name, status=terminal, timeout=remaining, polling_interval=2)
        except TimeoutError:
            fail(f"TrainJob {where} did not finish within {timeout_seconds}s (status {status_of().status})"
                 f"{last_event()}")
        except Exception as err:  # noqa: BLE001
            fail(f"TrainJob {where}: cannot read its status: {api_reason(err)}")

    if job.status == "Failed":
        reason, message = "Failed", ""
        try:
            cr = custom.get_namespaced_custom_object(group, version, namespace, "trainjobs", name)
            for condition in cr.get("status", {}).get("conditions", []):
                if condition.get("type") == "Failed" and condition.get("status") == "True":
                    reason, message = condition.get("reason") or reason, condition.get("message") or ""
        except Exception as err:  # noqa: BLE001
            message = f"(its conditions are not readable: {api_reason(err)})"
        fail(f"TrainJob {where} failed: {reason}" + (f": {message}" if message else ""))

    mount_path = mount["mountPath"] if mount else ""
    print(f"TrainJob {where} Complete" + (f"; checkpoint directory {mount_path} on volume {claim}" if claim else ""),
          flush=True)

    # ---- its run's checkpoint, a new version of a registered model in MLflow ---------------------
    model_version = ""
    if register_model:
        user, password = os.environ.get("MLFLOW_TRACKING_USERNAME", ""), os.environ.get("MLFLOW_TRACKING_PASSWORD", "")
        if not user:
            try:
                data = client.backend.core_api.read_namespaced_secret("trainstack-tracking", namespace).data or {}
            except Exception as err:  # noqa: BLE001
                fail(f"run_trainjob: register_model: no MLFLOW_TRACKING_USERNAME, and the namespace's Secret "
                     f"{namespace}/trainstack-tracking is not readable: {api_reason(err)}")
            user, password = (base64.b64decode(data.get(k, "")).decode() for k in ("username", "password"))
        auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

        class MlflowError(Exception):
            """MLflow refused a call: (error_code, message)."""

        def mlflow(method: str, path: str, body=None, **query) -> dict:
            """One call of MLflow's REST API (the tracking server's documented /api/2.0/mlflow); its answer,
            or MlflowError(error_code, message)."""
            url = f"{tracking_uri}/api/2.0/mlflow/{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
            request = urllib.request.Request(url, method=method, headers={"Content-Type": "application/json",
                                                                          "Authorization": auth},
                                             data=None if body is None else json.dumps(body).encode())
            try:
                with urllib.request.urlopen(request, timeout=30) as answer:
                    return json.loads(answer.read() or b"{}")
            except urllib.error.HTTPError as err:
                try:
                    detail = json.loads(err.read())
                except ValueError:
                    detail = {}
                raise MlflowError(detail.get("error_code", str(err.code)), detail.get("message", err.reason)) from None
            except (urllib.error.URLError, OSError) as err:
                fail(f"run_trainjob: register_model: MLflow at {tracking_uri} does not answer "
                     f"({getattr(err, 'reason', err)})")

        try:
            experiment = mlflow("GET", "experiments/get-by-name", experiment_name=namespace)["experiment"]
            runs = mlflow("POST", "runs/search", {
                "experiment_ids": [experiment["experiment_id"]], "max_results": 1,
                "filter": f"attributes.run_name = '{name}' and attributes.status = 'FINISHED'",
                "order_by": ["attributes.start_time DESC"]}).get("runs") or []
            if not runs:
                fail(f"run_trainjob: register_model: TrainJob {where} is Complete but MLflow has no FINISHED run named "
                     f"{name} in experiment {namespace} (does the script log its run? train_ddp.py does, with "
                     "trainstack_tracking.py beside it)")
            run = runs[0]["info"]
            try:
                mlflow("POST", "registered-models/create", {"name": register_model})
            except MlflowError as err:
                if err.args[0] != "RESOURCE_ALREADY_EXISTS":
                    raise
            version = mlflow("POST", "model-versions/create", {
                "name": register_model, "source": f"{run['artifact_uri']}/checkpoint", "run_id": run["run_id"],
                "tags": [{"key": "trainjob", "value": name}, {"key": "namespace", "value": namespace}]})
        except MlflowError as err:
            fail(f"run_trainjob: register_model {register_model!r} from TrainJob {where}: MLflow said "
                 f"{err.args[0]}: {str(err.args[1])[:200]}")
        model_version = str(version["model_version"]["version"])
        print(f"model {register_model} version {model_version}: run {run['run_id']} of TrainJob {where} "
              f"({run['artifact_uri']}/checkpoint)", flush=True)
    outputs = namedtuple("Outputs", ["trainjob", "output_claim", "output_mount_path", "model_version"])
    return outputs(name, claim, mount_path, model_version)
