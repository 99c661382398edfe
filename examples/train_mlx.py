"""Data-parallel MLX training across MPI ranks: the workload for the mlx-distributed runtimes.

Kubeflow Trainer's MPI plugin (v2.3.0) runs the TrainJob's command on the launcher pod only; the
command is mpirun (the Kubeflow SDK adds "mpirun --hostfile /etc/mpi/hostfile" on MPI runtimes),
which starts one rank per slot of the hostfile: on the node pods over ssh (port 2222, the key the
plugin mounts) and, with runLauncherAsNode, on the launcher itself. So a TrainJob with
numNodes 2 runs two ranks on two pods:

    mpirun --hostfile /etc/mpi/hostfile python3 examples/train_mlx.py --steps 100
    python3 examples/train_mlx.py                  # alone (no mpirun) it trains as one process

Under mpirun (OMPI_COMM_WORLD_SIZE is set) the script joins MLX's MPI group strictly and checks
its size: without OpenMPI, MLX would silently train as a group of one. Each rank holds its own
shard of a synthetic least-squares problem (drawn from the seed and the rank: nothing is
downloaded). Every step computes the gradient on the local shard and averages it across ranks
(mlx.nn.average_gradients, an all_sum over MPI), so all ranks keep the same weights. Every rank prints one JSON object per
line: "start" (world size, host and a check all_sum), "step" lines (the global mean squared error)
and "done" (final loss, the distance to the true weights, and a digest of the weights, equal on
every rank). mpirun gathers every rank's output in the launcher's log.

Where the platform's tracking is on, rank 0 logs the run to MLflow (the parameters, the loss at every
step, the final metrics and the weights as an artifact) through trainstack_tracking.py, which must sit
beside this file; a run that raises ends FAILED. Rank 0 is on a node pod, started over ssh: the golden
MPI runtimes name the tracking variables in OMPI_MCA_mca_base_env_list, so mpirun passes them on.

Kept free of shell-special characters (dollar, backquote, backslash): the Kubeflow SDK example
ships this file's text inside a shell here-document (sdk_submit.py --script).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import sys
import tempfile
import time


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="train_mlx.py", description="Data-parallel MLX least squares "
                                     "across the MPI ranks of an mlx-distributed TrainJob (synthetic data).")
    parser.add_argument("--steps", type=int, default=100, help="gradient steps (default 100)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the true weights and every shard")
    parser.add_argument("--samples", type=int, default=512, help="samples per rank (default 512)")
    parser.add_argument("--features", type=int, default=8, help="features of the regression (default 8)")
    parser.add_argument("--lr", type=float, default=0.1, help="learning rate (default 0.1)")
    parser.add_argument("--log-every", type=int, default=10, help="print a step line every N steps")
    args = parser.parse_args(argv)
    for name in ("steps", "samples", "features", "log_every"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def emit(**record: object) -> None:
    print(json.dumps(record), flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    import mlx.core as mx
    from mlx import nn

    mx.set_default_device(mx.cpu)
    launched = os.environ.get("OMPI_COMM_WORLD_SIZE")
    if launched:  # under mpirun: every rank mpirun started in one MPI group, or nothing
        try:
            group = mx.distributed.init(strict=True, backend="mpi")
        except RuntimeError as err:
            raise SystemExit(f"train_mlx.py: mpirun started {launched} ranks but MLX cannot use MPI: {err}") from None
        if group.size() != int(launched):
            raise SystemExit(f"train_mlx.py: mpirun started {launched} ranks but MLX's MPI group has {group.size()}")
    else:  # MLX's own ring backend where mlx.launch set it up, else a group of one (a singleton MPI_Init would
        # need a network interface that is up, and aborts the process where none is)
        group = mx.distributed.init(backend="ring")
    rank, world = group.rank(), group.size()

    # A check all_sum: rank r contributes r + 1.
    total = mx.distributed.all_sum(mx.array(rank + 1.0), group=group).item()
    emit(event="start", framework="mlx", mlx=mx.__version__, rank=rank, world_size=world, host=socket.gethostname(),
         allreduce=total, allreduce_expected=world * (world + 1) / 2)

    w_true = mx.random.normal((args.features,), key=mx.random.key(args.seed))
    x_key, noise_key = mx.random.split(mx.random.key(args.seed * 1000 + rank + 1))  # this rank's shard
    x = mx.random.normal((args.samples, args.features), key=x_key)
    y = x @ w_true + 0.01 * mx.random.normal((args.samples,), key=noise_key)
    params = {"w": mx.zeros((args.features,))}

    def loss_fn(p: dict) -> mx.array:
        return mx.mean((x @ p["w"] - y) ** 2)

    value_and_grad = mx.value_and_grad(loss_fn)
    from trainstack_tracking import Tracker  # beside this file (sdk_submit.py ships it)

    with Tracker(rank == 0) as tracker:  # the run ends FAILED if training raises
        tracker.params({**vars(args), "world_size": world, "mlx": mx.__version__})
        losses = []
        for i in range(1, args.steps + 1):
            loss, grads = value_and_grad(params)
            # the cross-rank all-reduce: the mean of every shard's gradient (equal shards: the global gradient)
            grads = nn.average_gradients(grads, group=group)
            params = {"w": params["w"] - args.lr * grads["w"]}
            # every rank, every step: a collective that only rank 0 (the tracked one) called would never end
            global_loss = (mx.distributed.all_sum(loss, group=group) / world).item()
            if tracker.active:
                tracker.metric("loss", global_loss, i)
            if i == 1 or i % args.log_every == 0 or i == args.steps:
                losses.append(global_loss)
                emit(event="step", rank=rank, step=i, loss=global_loss)
        weights = params["w"]
        mx.eval(weights)
        done = {"loss_first": losses[0], "loss_last": losses[-1],
                "weight_error": mx.linalg.norm(weights - w_true).item(),
                "seconds": round(time.monotonic() - started, 2)}
        tracker.metrics({"final_loss": done["loss_last"], "weight_error": done["weight_error"],
                         "train_s": done["seconds"]})
        if tracker.active:
            with tempfile.TemporaryDirectory() as folder:
                mx.save(os.path.join(folder, "weights.npy"), weights)
                tracker.artifact(os.path.join(folder, "weights.npy"), "model")
    emit(event="done", framework="mlx", rank=rank, world_size=world, steps=args.steps, **done,
         weights_sha256=hashlib.sha256(bytes(memoryview(weights))).hexdigest())
    return 0


if __name__ == "__main__":
    sys.exit(main())
