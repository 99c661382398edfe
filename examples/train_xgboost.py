"""Distributed XGBoost: one model trained by every worker together, for the xgboost-distributed runtime.

Kubeflow Trainer's XGBoost plugin (v2.3.0) starts one worker per node pod on CPU and gives it
DMLC_TRACKER_URI (pod 0 behind the JobSet's headless Service), DMLC_TRACKER_PORT (29500),
DMLC_TASK_ID (the pod's completion index) and DMLC_NUM_WORKER. Worker 0 runs the Rabit tracker
on that port (ranks ordered by task id); every worker waits for that name to resolve (pod 0
is in DNS only once it has an address), then joins the collective through it, builds a
QuantileDMatrix from its own shard (the quantile sketch is merged across workers) and trains the
same boosted trees with hist, whose gradient histograms are all-reduced every round:

    python examples/train_xgboost.py --rounds 30      # in each pod; alone it trains as one worker

The data is a synthetic binary classification drawn from the seed and the task id (nothing is
downloaded); every worker scores the model on the same held-out set and compares it with a
trivial baseline (always the majority class of the training labels, all workers counted).
Every worker prints one JSON object per line: "start" (world size and a check all-reduce),
"round" lines (the training logloss, all workers' data) and "done" (held-out accuracy and logloss
beside the baseline's, the model's digest, and whether it equals worker 0's).

Where the platform's tracking is on, worker 0 logs the run to MLflow (the parameters, the training
logloss of every round, the held-out scores and the model as an artifact) through
trainstack_tracking.py, which must sit beside this file; a run that raises, or whose workers end
with different models, ends FAILED.

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
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # run by main(): trainstack_tracking.py, shipped beside this file
    from trainstack_tracking import Tracker


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="train_xgboost.py", description="One XGBoost model trained by the "
                                     "workers of an xgboost-distributed TrainJob together (synthetic data).")
    parser.add_argument("--rounds", type=int, default=30, help="boosting rounds (default 30)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the problem, every shard and the test set")
    parser.add_argument("--samples", type=int, default=4000, help="training rows per worker (default 4000)")
    parser.add_argument("--features", type=int, default=10, help="features (default 10)")
    parser.add_argument("--max-depth", type=int, default=4, help="tree depth (default 4)")
    parser.add_argument("--threads", type=int, default=1,
                        help="threads per worker (default 1; at most the CPUs the pod may use)")
    parser.add_argument("--tracker-host", default="0.0.0.0",
                        help="address worker 0's tracker listens on (default 0.0.0.0: every address of the pod)")
    parser.add_argument("--log-every", type=int, default=5, help="print a round line every N rounds")
    parser.add_argument("--resolve-timeout", type=float, default=300,
                        help="seconds to wait for the tracker's address (pod 0) to resolve (default 300)")
    args = parser.parse_args(argv)
    for name in ("rounds", "samples", "features", "max_depth", "threads", "log_every"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def emit(**record: object) -> None:
    print(json.dumps(record), flush=True)


def wait_for_host(host: str, port: int, timeout: float, resolve=socket.getaddrinfo) -> float:
    """Wait until HOST resolves; the seconds waited. Pod 0's name (the JobSet's headless Service) is in DNS
    only once that pod has an address, and a worker may start before it: XGBoost's collective retries a
    refused connection (dmlc_retry) but fails at once on a name that does not resolve yet."""
    started = time.monotonic()
    while True:
        try:
            resolve(host, port, type=socket.SOCK_STREAM)
            return time.monotonic() - started
        except socket.gaierror as err:
            if time.monotonic() - started >= timeout:
                raise SystemExit(f"train_xgboost.py: the tracker's address {host} did not resolve within "
                                 f"{timeout:.0f}s ({err})") from None
            time.sleep(0.5)


def make_data(seed: int, shard: int, rows: int, features: int):
    """Rows of the hidden rule y = [x0 + 2 x1 - x2 x3 + noise > 0]; shard picks the rows."""
    import numpy as np

    rng = np.random.default_rng([seed, shard])
    x = rng.normal(size=(rows, features))
    y = (x[:, 0] + 2 * x[:, 1] - x[:, 2] * x[:, 3] + 0.3 * rng.normal(size=rows) > 0).astype(np.float32)
    return x, y


def train(args: argparse.Namespace, rank: int, world: int, tracker: Tracker) -> dict:
    import numpy as np
    import xgboost as xgb
    from xgboost import collective

    if world > 1:
        assert collective.get_world_size() == world and collective.get_rank() == rank, "rank or world size differs"
    total = float(collective.allreduce(np.array([rank + 1.0]), collective.Op.SUM)[0]) if world > 1 else 1.0
    emit(event="start", framework="xgboost", xgboost=xgb.__version__, rank=rank, world_size=world,
         allreduce=total, allreduce_expected=world * (world + 1) / 2)
    x, y = make_data(args.seed, 1 + rank, args.samples, args.features)
    dtrain = xgb.QuantileDMatrix(x, label=y)
    history: dict = {}
    booster = xgb.train({"objective": "binary:logistic", "tree_method": "hist", "max_depth": args.max_depth,
                         "eta": 0.3, "eval_metric": "logloss", "seed": args.seed, "nthread": args.threads},
                        dtrain, num_boost_round=args.rounds, evals=[(dtrain, "train")], evals_result=history,
                        verbose_eval=False)
    train_loss = history["train"]["logloss"]
    for i, value in enumerate(train_loss, start=1):
        tracker.metric("train_logloss", value, i)
        if i == 1 or i % args.log_every == 0 or i == args.rounds:
            emit(event="round", rank=rank, round=i, train_logloss=float(value))
    # The baseline: the majority class of every worker's labels, as a constant probability.
    counts = np.array([float(y.sum()), float(len(y))])
    if world > 1:
        counts = collective.allreduce(counts, collective.Op.SUM)
    rate = float(counts[0] / counts[1])
    x_test, y_test = make_data(args.seed, 0, 2000, args.features)
    p = booster.predict(xgb.DMatrix(x_test))
    eps = 1e-7

    def logloss(q):
        q = np.clip(q, eps, 1 - eps)
        return float(-np.mean(y_test * np.log(q) + (1 - y_test) * np.log(1 - q)))

    digest = hashlib.sha256(booster.save_raw("json")).hexdigest()
    rank0 = collective.broadcast(digest, 0) if world > 1 else digest
    result = {"rounds": args.rounds, "train_logloss_first": float(train_loss[0]),
              "train_logloss_last": float(train_loss[-1]),
              "test_accuracy": float(np.mean((p > 0.5) == (y_test > 0.5))),
              "baseline_accuracy": float(np.mean(y_test == (1.0 if rate >= 0.5 else 0.0))),
              "test_logloss": logloss(p), "baseline_logloss": logloss(np.full_like(p, rate)),
              "model_sha256": digest, "same_model_as_rank0": rank0 == digest}
    tracker.metrics({k: result[k] for k in ("test_accuracy", "baseline_accuracy", "test_logloss", "baseline_logloss",
                                            "train_logloss_last")})
    if tracker.active:
        with tempfile.TemporaryDirectory() as folder:
            booster.save_model(os.path.join(folder, "model.json"))
            tracker.artifact(os.path.join(folder, "model.json"), "model")
    return result


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    rank = int(os.environ.get("DMLC_TASK_ID", "0"))
    world = int(os.environ.get("DMLC_NUM_WORKER", "1"))
    port = int(os.environ.get("DMLC_TRACKER_PORT", "29500"))
    if "DMLC_TRACKER_URI" in os.environ:
        waited = wait_for_host(os.environ["DMLC_TRACKER_URI"], port, args.resolve_timeout)
        if waited >= 1:
            print(f"waited {waited:.1f}s for {os.environ['DMLC_TRACKER_URI']} to resolve", file=sys.stderr, flush=True)
    import xgboost
    from trainstack_tracking import Tracker
    from xgboost import collective
    from xgboost.tracker import RabitTracker

    with Tracker(rank == 0) as run:  # the MLflow run; FAILED if training raises
        run.params({**vars(args), "world_size": world, "xgboost": xgboost.__version__})
        rabit = None
        if "DMLC_TRACKER_URI" in os.environ:
            if rank == 0:
                rabit = RabitTracker(n_workers=world, host_ip=args.tracker_host, port=port, sortby="task")
                rabit.start()
            # dmlc_retry: worker 1 may start before worker 0's tracker listens
            with collective.CommunicatorContext(dmlc_tracker_uri=os.environ["DMLC_TRACKER_URI"],
                                                dmlc_tracker_port=port, dmlc_task_id=str(rank), dmlc_retry=60,
                                                dmlc_timeout=600):
                result = train(args, rank, world, run)
            if rabit is not None:
                rabit.wait_for()
        else:
            result = train(args, rank, 1, run)
        run.end("FINISHED" if result["same_model_as_rank0"] else "FAILED")
    emit(event="done", framework="xgboost", rank=rank, world_size=world, **result,
         seconds=round(time.monotonic() - started, 2))
    return 0 if result["same_model_as_rank0"] else 1


if __name__ == "__main__":
    sys.exit(main())
