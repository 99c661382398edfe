"""A small torch DDP training job: the workload trainstack's smoke runs and the example TrainJob submits.

Started by torchrun, which reads the PET_* variables Kubeflow Trainer injects (PET_NNODES,
PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT), so the same file runs
unchanged on CPU nodes (gloo) and GPU nodes (nccl, one process per GPU):

    torchrun examples/train_ddp.py --steps 60 --seed 0

Run without torchrun it trains as a single process. The data is synthetic and drawn from the
seed (nothing is downloaded), so a seed gives the same loss sequence on every run. Rank 0
prints one JSON object per line: a "start" line, one "step" line per step and a "done" line.
The checkpoint (model, optimizer, step) goes to --output-dir, by default the TRAINSTACK_OUTPUT_DIR
variable, else /workspace/output (where the golden runtimes mount the output volume); --resume
continues from it. Rank 0 reads the checkpoint and hands it to the other ranks, so only node 0
needs the output volume. Where the platform's tracking is on, rank 0 also logs the run to MLflow
(parameters, the loss per step, the final metrics, the checkpoint) through trainstack_tracking.py,
which must sit beside this file; a run that raises ends FAILED.

Kept free of shell-special characters (dollar, backquote, backslash) on purpose: the Kubeflow
SDK example ships this file's text inside a shell here-document (see sdk_submit.py).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
import warnings
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

# The CUDA wheels of torch warn at import when numpy is absent; this script never uses numpy.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

if TYPE_CHECKING:  # run by main(): trainstack_tracking.py, shipped beside this file
    from trainstack_tracking import Tracker

CHECKPOINT_NAME = "checkpoint.pt"
DEFAULT_OUTPUT_DIR = "/workspace/output"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="train_ddp.py", description="A small torch DDP training job (synthetic data).")
    parser.add_argument("--steps", type=int, default=60, help="total optimizer steps (a resumed run stops here too)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the model, the teacher and every batch")
    parser.add_argument("--batch-size", type=int, default=64, help="samples per rank and step")
    parser.add_argument("--features", type=int, default=16, help="input features of the synthetic regression")
    parser.add_argument("--hidden", type=int, default=64, help="width of the MLP's hidden layers")
    parser.add_argument("--lr", type=float, default=0.01, help="Adam learning rate")
    parser.add_argument("--output-dir", default=os.environ.get("TRAINSTACK_OUTPUT_DIR", DEFAULT_OUTPUT_DIR),
                        help="where the checkpoint goes (default: TRAINSTACK_OUTPUT_DIR, else /workspace/output)")
    parser.add_argument("--checkpoint-every", type=int, default=0,
                        help="also save every N steps (0: only at the end)")
    parser.add_argument("--resume", action="store_true", help="continue from the checkpoint in --output-dir if there is one")
    parser.add_argument("--collective-timeout", type=float, default=1800.0, metavar="SECONDS",
                        help="give up a collective (and exit non-zero) when a peer has not answered this long, so "
                             "the job's retries can start again from the checkpoint (default 1800, torch's own)")
    args = parser.parse_args(argv)
    for name in ("steps", "batch_size", "features", "hidden"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.checkpoint_every < 0:
        parser.error("--checkpoint-every must not be negative")
    return args


def build_model(features: int, hidden: int) -> nn.Module:
    return nn.Sequential(nn.Linear(features, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                         nn.Linear(hidden, 1))


def teacher(seed: int, features: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The hidden function the model learns: y = sin(x @ w1) @ w2, fixed by the seed."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(features, 8, generator=gen) / features ** 0.5, torch.randn(8, 1, generator=gen)


def batch(seed: int, step: int, rank: int, world_size: int, batch_size: int, features: int,
          weights: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's slice of the step's global batch; the global batch depends on seed and step only."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + step)
    x = torch.randn(world_size * batch_size, features, generator=gen)
    y = torch.sin(x @ weights[0]) @ weights[1] + 0.01 * torch.randn(world_size * batch_size, 1, generator=gen)
    return x[rank * batch_size:(rank + 1) * batch_size], y[rank * batch_size:(rank + 1) * batch_size]


def save_checkpoint(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer, step: int,
                    args: argparse.Namespace, world_size: int) -> None:
    """Write atomically (temporary file, then rename) so a killed pod never leaves half a checkpoint."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                "seed": args.seed, "world_size": world_size,
                "config": {"features": args.features, "hidden": args.hidden}}, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: Path, device: str | torch.device = "cpu") -> dict:
    """Read a checkpoint this script wrote and rebuild its model: used by --resume and by the smoke."""
    state = torch.load(path, map_location=device, weights_only=True)
    model = build_model(state["config"]["features"], state["config"]["hidden"]).to(device)
    model.load_state_dict(state["model"])
    return {**state, "module": model}


def emit(record: dict) -> None:
    print(json.dumps(record, sort_keys=True), flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    distributed = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS on GPUs
    if torch.cuda.is_available():
        backend, device = "nccl", torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        backend, device = "gloo", torch.device("cpu")
    if distributed:
        dist.init_process_group(backend=backend, timeout=timedelta(seconds=args.collective_timeout))
        # where this rank runs and what the rendezvous address resolved to (every rank: each logs its own)
        master = os.environ.get("MASTER_ADDR", "")
        emit({"event": "rendezvous", "rank": rank, "host": socket.gethostname(), "master_addr": master,
              "master_ip": socket.gethostbyname(master) if master else ""})
    torch.use_deterministic_algorithms(True, warn_only=True)

    torch.manual_seed(args.seed)
    model = build_model(args.features, args.hidden).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    checkpoint = Path(args.output_dir) / CHECKPOINT_NAME
    state = None
    if args.resume and rank == 0 and checkpoint.is_file():
        state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    if args.resume and distributed:  # every rank resumes from rank 0's checkpoint, at the same step
        box = [state]
        dist.broadcast_object_list(box, src=0)
        state = box[0]
    start_step = 0
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start_step = int(state["step"])
    ddp = model
    if distributed:
        ddp = DistributedDataParallel(model, device_ids=[local_rank] if device.type == "cuda" else None)
    weights = teacher(args.seed, args.features)

    used = backend if distributed else "none"
    # imported here, not at the top: the checkpoint check and the smoke import this file as a library alone
    from trainstack_tracking import Tracker

    with Tracker(rank == 0) as tracker:  # the run ends FAILED if training raises
        tracker.params({**vars(args), "world_size": world_size, "backend": used, "torch": torch.__version__,
                        "start_step": start_step})
        ran, elapsed, last = train(args, rank, world_size, used, device, model, ddp, optimizer, weights,
                                   checkpoint, start_step, tracker)
        if rank == 0:
            save_checkpoint(checkpoint, model, optimizer, max(args.steps, start_step), args, world_size)
            tracker.metrics({"final_loss": last, "train_s": elapsed, "steps_run": ran})
            tracker.artifact(str(checkpoint), "checkpoint")
            emit({"event": "done", "steps_run": ran, "step": max(args.steps, start_step),
                  "train_s": round(elapsed, 4),
                  "steps_per_s": round(ran / elapsed, 3) if ran > 0 and elapsed > 0 else 0.0,
                  "checkpoint": str(checkpoint)})
    if distributed:
        finish(rank)
    return 0


def finish(rank: int) -> None:
    """The last barrier, then the process group's teardown. By then every rank ran every step with rank 0 (each
    step's all_reduce) and rank 0 saved the checkpoint, so on another rank an error here ends no work: rank 0
    may exit as soon as the barrier lets it, closing its connections while gloo's last message to this rank is
    still on its way. That rank logs the error and ends as done; a restart could only fail to find rank 0
    again. On rank 0 the error is raised."""
    try:
        dist.barrier()
        dist.destroy_process_group()
    except (RuntimeError, OSError) as err:  # torch.distributed.DistBackendError is a RuntimeError
        if rank == 0:
            raise
        emit({"event": "teardown", "rank": rank, "error": str(err).splitlines()[0][:300] if str(err) else repr(err)})


def train(args: argparse.Namespace, rank: int, world_size: int, backend: str, device: torch.device,
          model: nn.Module, ddp: nn.Module, optimizer: torch.optim.Optimizer, weights: tuple,
          checkpoint: Path, start_step: int, tracker: Tracker) -> tuple[int, float, float]:
    """The training loop: (steps run, seconds, last global loss)."""
    last = float("nan")
    if rank == 0:
        emit({"event": "start", "backend": backend, "device": device.type,
              "world_size": world_size, "nnodes": int(os.environ.get("GROUP_WORLD_SIZE", "1")),
              "nproc_per_node": int(os.environ.get("LOCAL_WORLD_SIZE", "1")), "start_step": start_step,
              "steps": args.steps, "seed": args.seed, "torch": torch.__version__,
              "params": sum(p.numel() for p in model.parameters()),
              "resumed": start_step > 0})
    started = time.perf_counter()
    for step in range(start_step + 1, args.steps + 1):
        x, y = batch(args.seed, step, rank, world_size, args.batch_size, args.features, weights)
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        optimizer.step()
        global_loss = loss.detach().clone()
        if world_size > 1:  # the logged loss is the mean over the global batch, the same for any layout
            dist.all_reduce(global_loss)
            global_loss /= world_size
        if rank == 0:
            last = global_loss.item()
            emit({"event": "step", "step": step, "loss": last})
            tracker.metric("loss", last, step)
            if args.checkpoint_every and step % args.checkpoint_every == 0 and step < args.steps:
                save_checkpoint(checkpoint, model, optimizer, step, args, world_size)
    return args.steps - start_step, time.perf_counter() - started, last


if __name__ == "__main__":
    sys.exit(main())
