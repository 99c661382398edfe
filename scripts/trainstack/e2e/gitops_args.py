"""What `e2e --gitops` refuses before anything starts: one line for each."""

from __future__ import annotations

import shutil
from typing import Any

from .. import lock as lockmod
from .. import tools
from ..errors import UserError


def check_args(args: Any) -> None:
    """`e2e --gitops` runs on the local provider's real node; one line for anything else, before anything starts."""
    if args.provider != "local":
        raise UserError(f"--gitops runs on --provider local, not {args.provider}",
                        "Argo CD's components run inside the local cluster's network namespace", exit_code=2)
    if args.nodes not in (None, "real"):
        raise UserError(f"--gitops runs on the real node (--nodes real), not --nodes {args.nodes}",
                        "the controllers Argo CD deploys must really run", exit_code=2)
    if getattr(args, "upgrade_from", None) or args.data_cache:
        raise UserError("--gitops cannot be combined with --upgrade-from or --data-cache", exit_code=2)
    lock = lockmod.load()
    for binary in ("argocd", "registry"):
        if tools.find(binary, lock) is None:
            tool = lock.tool_for_binary(binary)
            raise UserError(f"{binary} {tool.version} is not installed",
                            f"run 'make setup-gitops' (or 'trainstack tools install {tool.name}')")
    if not shutil.which("redis-server") or not shutil.which("git"):
        raise UserError("--gitops needs git and redis-server (the lock's Debian package)",
                        "run 'make setup-gitops' (trainstack node prereqs installs redis-server)")
    args.nodes = "real"
