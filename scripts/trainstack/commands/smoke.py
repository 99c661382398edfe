"""`trainstack smoke train|install`: real torch DDP training on this machine."""

from __future__ import annotations

import argparse

from .. import smoke


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="smoke_command", required=True)

    train = sub.add_parser("train", help="run examples/train_ddp.py as a TrainJob's nodes would, and check it",
                           description="Runs examples/train_ddp.py with torchrun as the nodes of a TrainJob, each "
                                       "with the PET_* variables Kubeflow Trainer injects, then checks that every "
                                       "rank succeeded, the loss fell and the checkpoint loads. Arguments after "
                                       "'--' go to the training script.")
    train.add_argument("--nodes", type=int, default=2, help="TrainJob numNodes (CPU mode; default 2)")
    train.add_argument("--cpu", default="1",
                       help="CPU request of each node; the controller turns it into PET_NPROC_PER_NODE (default 1)")
    train.add_argument("--gpu", action="store_true",
                       help="one node with every local GPU (nproc per node = GPU count, nccl)")
    train.add_argument("--steps", type=int, default=30, help="training steps (default 30)")
    train.add_argument("--seed", type=int, default=0, help="seed of the model and the synthetic data")
    train.add_argument("--trainjob", default="smoke", help="TrainJob name the PET_* variables are derived from")
    train.add_argument("--python", help="interpreter with torch that runs torchrun (default: this one)")
    train.add_argument("--network", choices=["auto", "namespace", "host"], default="auto",
                       help="auto (default): a private network namespace when allowed, else host; host: torch's "
                            "rendezvous store then listens on every interface while the run lasts")
    train.add_argument("--timeout", type=float, default=600, help="seconds before the run is stopped")
    train.add_argument("--workdir", help="new or empty folder for logs and the checkpoint (kept); default: a "
                                         "temporary folder, removed after a successful run")
    train.add_argument("--keep", action="store_true", help="keep the temporary folder after success")
    train.add_argument("-o", "--output", choices=["text", "json"], default="text")
    train.add_argument("script_args", nargs="*", metavar="-- ARGS", help="extra arguments for train_ddp.py")
    train.set_defaults(func=smoke._cmd_train)

    install = sub.add_parser("install", help="install the lock's python.train packages (torch, kubeflow) into "
                                             "this environment; skips what is already there")
    install.add_argument("--profile", choices=["cpu", "full"], default="cpu",
                         help="cpu (default): torch without the CUDA parts only GPU use loads; full: everything")
    install.set_defaults(func=smoke._cmd_install)
