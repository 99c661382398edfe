"""Data-parallel JAX training across processes: the workload for the jax-distributed runtime.

Kubeflow Trainer's JAX plugin (v2.3.0) starts one process per node pod and gives it
JAX_NUM_PROCESSES (the TrainJob's numNodes), JAX_PROCESS_ID (the pod's completion index) and
JAX_COORDINATOR_ADDRESS (pod 0 behind the JobSet's headless Service, port 29500). This script
passes them to jax.distributed.initialize, so the processes form one JAX runtime whose CPU
collectives (gloo) cross the pods:

    python examples/train_jax.py --steps 200          # in each pod; alone it trains as one process

Each process holds its own shard of a synthetic least-squares problem (drawn from the seed and the
process index: nothing is downloaded). Every step computes the gradient on the local shard and
averages it across processes with jax.lax.psum inside jax.shard_map, so all processes keep the
same weights. Every process prints one JSON object per line: "start" (world size and a check
all-reduce), "step" lines (the global mean squared error) and "done" (final loss, the distance to
the true weights, and a digest of the weights, equal on every process).

Where the platform's tracking is on, process 0 logs the run to MLflow (the parameters, the loss
at every step, the final metrics and the weights as an artifact) through trainstack_tracking.py,
which must sit beside this file; a run that raises ends FAILED.

Cluster detection is switched off: the Trainer variables say everything, and without it JAX needs
neither the kubernetes package nor the right to list pods. If a node has IPv6 disabled, set
JAX_COORDINATOR_BIND_ADDRESS=0.0.0.0:29500 in the TrainJob's trainer env.

Kept free of shell-special characters (dollar, backquote, backslash): the Kubeflow SDK example
ships this file's text inside a shell here-document (sdk_submit.py --script).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="train_jax.py", description="Data-parallel JAX least squares "
                                     "across the processes of a jax-distributed TrainJob (synthetic data).")
    parser.add_argument("--steps", type=int, default=200, help="gradient steps (default 200)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the true weights and every shard")
    parser.add_argument("--samples", type=int, default=512, help="samples per process (default 512)")
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
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    world = int(os.environ.get("JAX_NUM_PROCESSES", "1"))
    if world > 1 or "JAX_COORDINATOR_ADDRESS" in os.environ:
        jax.distributed.initialize(coordinator_address=os.environ["JAX_COORDINATOR_ADDRESS"],
                                   num_processes=world, process_id=int(os.environ.get("JAX_PROCESS_ID", "0")),
                                   cluster_detection_method="deactivate")
    rank, world, local = jax.process_index(), jax.process_count(), jax.local_device_count()
    mesh = jax.make_mesh((jax.device_count(),), ("dp",))
    sharded, replicated = NamedSharding(mesh, P("dp")), NamedSharding(mesh, P())

    # A check all-reduce: process r contributes r + 1 on each local device.
    ones = jax.make_array_from_process_local_data(sharded, np.full((local,), rank + 1.0, np.float32))
    total = float(jax.jit(jnp.sum, out_shardings=replicated)(ones))
    emit(event="start", framework="jax", jax=jax.__version__, rank=rank, world_size=world,
         devices=jax.device_count(), backend=jax.default_backend(), allreduce=total,
         allreduce_expected=local * world * (world + 1) / 2)

    w_true = np.random.default_rng(args.seed).normal(size=(args.features,)).astype(np.float32)
    rng = np.random.default_rng([args.seed, rank])  # this process's shard
    x_local = rng.normal(size=(args.samples, args.features)).astype(np.float32)
    y_local = x_local @ w_true + 0.01 * rng.normal(size=(args.samples,)).astype(np.float32)
    x = jax.make_array_from_process_local_data(sharded, x_local)
    y = jax.make_array_from_process_local_data(sharded, y_local)
    w = jax.make_array_from_process_local_data(replicated, np.zeros(args.features, np.float32))
    n_global = float(args.samples * world)

    def local_step(w, x, y):
        err = x @ w - y
        # the cross-process all-reduce: sums of squared errors and gradients over every shard
        loss = jax.lax.psum(jnp.sum(err ** 2), "dp") / n_global
        grad = jax.lax.psum(2.0 * x.T @ err, "dp") / n_global
        return w - args.lr * grad, loss

    step = jax.jit(jax.shard_map(local_step, mesh=mesh, in_specs=(P(), P("dp"), P("dp")), out_specs=(P(), P())))
    from trainstack_tracking import Tracker  # beside this file (sdk_submit.py ships it)

    with Tracker(rank == 0) as tracker:  # the run ends FAILED if training raises
        tracker.params({**vars(args), "world_size": world, "devices": jax.device_count(), "jax": jax.__version__})
        losses = []
        for i in range(1, args.steps + 1):
            w, loss = step(w, x, y)
            if tracker.active:
                tracker.metric("loss", float(loss), i)
            if i == 1 or i % args.log_every == 0 or i == args.steps:
                losses.append(float(loss))
                emit(event="step", rank=rank, step=i, loss=losses[-1])
        weights = np.asarray(w)
        done = {"loss_first": losses[0], "loss_last": losses[-1],
                "weight_error": float(np.linalg.norm(weights - w_true)),
                "seconds": round(time.monotonic() - started, 2)}
        tracker.metrics({"final_loss": done["loss_last"], "weight_error": done["weight_error"],
                         "train_s": done["seconds"]})
        if tracker.active:
            with tempfile.TemporaryDirectory() as folder:
                np.save(os.path.join(folder, "weights.npy"), weights)
                tracker.artifact(os.path.join(folder, "weights.npy"), "model")
    emit(event="done", framework="jax", rank=rank, world_size=world, steps=args.steps, **done,
         weights_sha256=hashlib.sha256(weights.tobytes()).hexdigest())
    if world > 1:
        jax.distributed.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
