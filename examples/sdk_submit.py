"""Submit examples/train_ddp.py (or another example) as a Kubeflow TrainJob with the Kubeflow Python SDK.

    python examples/sdk_submit.py                                  # torch-distributed, 2 nodes
    python examples/sdk_submit.py --runtime torch-distributed --num-nodes 4 --namespace team-a --cpu 2
    python examples/sdk_submit.py --dry-run                        # print the TrainJob; needs no cluster
    python examples/sdk_submit.py -- --steps 500 --seed 3          # arguments after -- go to train_ddp.py
    python examples/sdk_submit.py --runtime jax-distributed --script examples/train_jax.py
    python examples/sdk_submit.py --runtime xgboost-distributed --script examples/train_xgboost.py
    python examples/sdk_submit.py --runtime mlx-distributed-cpu --script examples/train_mlx.py

The SDK's CustomTrainer ships a Python function to the runtime, which runs it under torchrun on
every node with the PET_* variables the controller injects (on the JAX and XGBoost runtimes it runs
it under python, with their JAX_* or DMLC_* variables; on the MPI runtimes, such as MLX's, under
`mpirun` on the launcher, one rank per node). The function here, `run_script`,
carries the text of the script (and of trainstack_tracking.py, which the examples log their
MLflow run with), writes them to files in the container and runs the script, so the job
trains with exactly the script `trainstack smoke train` tests, in the runtime's stock torch
image: nothing to build or mount. The checkpoint goes to /workspace/output, where the golden
runtimes mount the output volume. Prints the TrainJob's name.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

TRAIN_SCRIPT = Path(__file__).resolve().parent / "train_ddp.py"
# Shipped beside every script: the examples log their run to MLflow with it (when tracking is on).
HELPERS = [Path(__file__).resolve().parent / "trainstack_tracking.py"]
DEFAULT_RUNTIME = "torch-distributed"
# The SDK places the function's text and arguments in a shell here-document, which would expand these.
SHELL_SPECIAL = ("$", "`", "\\")


def run_script(source: str, argv: list, name: str = "train_ddp.py", helpers: dict | None = None) -> None:
    """Runs in each training process on the cluster: write the script as NAME and HELPERS (file name:
    text) beside it, and run the script as __main__ with its folder first on the import path, as
    python would run it. (No dollar, backquote or backslash in this function: the SDK ships its
    source in a shell here-document too.)"""
    import os
    import runpy
    import sys
    import tempfile

    folder = tempfile.mkdtemp(prefix="trainstack-")
    for file_name, text in {**(helpers or {}), name: source}.items():
        with open(os.path.join(folder, file_name), "w") as handle:
            handle.write(text)
    path = os.path.join(folder, name)
    sys.argv = [path, *argv]
    sys.path.insert(0, folder)
    runpy.run_path(path, run_name="__main__")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Submit examples/train_ddp.py as a TrainJob (Kubeflow SDK).")
    parser.add_argument("--runtime", default=DEFAULT_RUNTIME, help=f"runtime name (default {DEFAULT_RUNTIME})")
    parser.add_argument("--num-nodes", type=int, default=2, help="training nodes (default 2)")
    parser.add_argument("--namespace", help="namespace of the TrainJob (default: the kubeconfig context's)")
    parser.add_argument("--script", type=Path, default=TRAIN_SCRIPT,
                        help="the training script (default examples/train_ddp.py)")
    parser.add_argument("--image", help="trainer image (default: the runtime's)")
    parser.add_argument("--cpu", help="CPUs per node; on CPU nodes this is also the processes per node")
    parser.add_argument("--memory", help="memory per node, e.g. 4Gi")
    parser.add_argument("--gpu", type=int, help="GPUs per node (one process per GPU)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the TrainJob that would be created, as JSON, without contacting a cluster")
    parser.add_argument("train_args", nargs="*", metavar="-- ARGS", help="arguments for the script")
    args = parser.parse_args(argv)
    if args.num_nodes < 1:
        parser.error("--num-nodes must be at least 1")
    bad = [a for a in args.train_args if any(c in a for c in SHELL_SPECIAL)]
    if bad:
        parser.error(f"training arguments must not contain $, backquotes or backslashes: {bad}")
    return args


def build_trainer(args: argparse.Namespace):
    """The SDK trainer object that describes the job: the function, its arguments, nodes and resources."""
    from kubeflow.trainer import CustomTrainer

    script = Path(args.script)
    texts = {}
    for path in (script, *HELPERS):
        try:
            texts[path.name] = path.read_text()
        except OSError as err:
            raise SystemExit(f"error: {'--script ' if path == script else ''}{path}: {err.strerror}") from None
        if any(c in texts[path.name] for c in SHELL_SPECIAL):
            raise SystemExit(f"error: {path} contains $, a backquote or a backslash; the SDK's shell "
                             "here-document would change it")
    source = texts.pop(script.name)
    resources = {k: v for k, v in (("cpu", args.cpu), ("memory", args.memory),
                                   ("gpu", str(args.gpu) if args.gpu else None)) if v}  # quantities as strings
    return CustomTrainer(func=run_script, func_args={"source": source, "argv": list(args.train_args),
                                                     "name": script.name, "helpers": texts},
                         num_nodes=args.num_nodes, resources_per_node=resources or None, image=args.image)


def dry_run_trainjob(args: argparse.Namespace) -> dict:
    """The TrainJob the SDK would create, built by the SDK's own code, offline.

    A real submit reads the runtime from the cluster; here it is described as the SDK reads a
    golden runtime of that name: torch (entry point torchrun) unless it names jax or xgboost (python) or
    mlx or deepspeed (MPI: mpirun on the launcher).
    """
    from kubeflow.trainer import Runtime, RuntimeKind, RuntimeTrainer, TrainerType
    from kubeflow.trainer.backends.kubernetes import utils
    from kubeflow.trainer.constants import constants
    from kubeflow_trainer_api import models

    framework = next((f for f in ("jax", "xgboost", "mlx", "deepspeed") if args.runtime.startswith(f)), "torch")
    runtime = Runtime(name=args.runtime, kind=RuntimeKind.CLUSTER_TRAINING_RUNTIME,
                      trainer=RuntimeTrainer(trainer_type=TrainerType.CUSTOM_TRAINER, framework=framework,
                                             image=args.image or "(the runtime's image)"))
    runtime.trainer.set_command(constants.TORCH_COMMAND if framework == "torch" else constants.MPI_COMMAND
                                if framework in ("mlx", "deepspeed") else constants.DEFAULT_COMMAND)
    trainer = utils.get_trainer_cr_from_custom_trainer(runtime, build_trainer(args))
    job = models.TrainerV1alpha1TrainJob(
        apiVersion=constants.API_VERSION, kind=constants.TRAINJOB_KIND,
        metadata=models.IoK8sApimachineryPkgApisMetaV1ObjectMeta(name="(generated on submit)",
                                                                 namespace=args.namespace),
        spec=models.TrainerV1alpha1TrainJobSpec(
            runtimeRef=models.TrainerV1alpha1RuntimeRef(name=runtime.name, kind=runtime.kind.value),
            trainer=trainer))
    return job.to_dict()


def submit(args: argparse.Namespace) -> str:
    from kubeflow.common.types import KubernetesBackendConfig
    from kubeflow.trainer import TrainerClient

    client = TrainerClient(backend_config=KubernetesBackendConfig(namespace=args.namespace))
    return client.train(runtime=args.runtime, trainer=build_trainer(args))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        import kubeflow.trainer  # noqa: F401
    except ImportError:
        print("error: the Kubeflow SDK is not installed (pip install 'kubeflow>=0.5.0', or "
              "'trainstack smoke install')", file=sys.stderr)
        return 1
    if args.dry_run:
        print(json.dumps(dry_run_trainjob(args), indent=2, sort_keys=True))
        return 0
    try:
        name = submit(args)
    except Exception as err:  # noqa: BLE001 - the SDK raises plain exceptions; show one line, not a traceback
        cause = f" ({err.__cause__})" if err.__cause__ else ""
        print(f"error: {type(err).__name__}: {err}{cause}".replace("\n", " "), file=sys.stderr)
        return 1
    print(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
