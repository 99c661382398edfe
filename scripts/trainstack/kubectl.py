"""kubectl (the pinned one, else one on PATH within the skew policy) against one cluster (a kubeconfig and, optionally, a context)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import lock as lockmod
from . import proc, tools, yamlio
from .errors import UserError, output_line


class Kubectl:
    """Runs kubectl against one cluster: the one place its command line is built. `kubectl()` and
    `kubectl_json()` are what LocalCluster, the kind cluster and the suite call. BINARY: this kubectl
    (a local cluster's own); CACHE_DIR: its discovery cache; ENV: its environment (default: this one's)."""

    def __init__(
        self, kubeconfig: Path | None = None, context: str | None = None, lock: lockmod.Lock | None = None,
        binary: Path | None = None, cache_dir: Path | None = None, env: dict[str, str] | None = None,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.context = context
        self.cache_dir, self.env = cache_dir, env
        self.binary = binary or tools.require_kubectl(lock)

    def base(self) -> list[str]:
        cmd = [str(self.binary)]
        if self.kubeconfig:
            cmd += ["--kubeconfig", str(self.kubeconfig)]
        if self.context:
            cmd += ["--context", self.context]
        if self.cache_dir:
            cmd += ["--cache-dir", str(self.cache_dir)]
        return cmd

    def line(self, *args: str) -> list[str]:
        """`kubectl ARGS` against this cluster, for a command that runs on (port-forward: proc.start)."""
        return [*self.base(), *args]

    def kubectl(
        self, *args: str, input_text: str | None = None, check: bool = True, timeout: float = 60
    ) -> proc.CompletedProcess:
        """Run kubectl ARGS; a failure (with CHECK) is a UserError with kubectl's message."""
        result = proc.run(self.line(*args), check=False, input=input_text, timeout=timeout, env=self.env,
                          what=f"kubectl {' '.join(args[:3])}")
        if check and result.returncode != 0:
            said = output_line(result.stderr or result.stdout, markers=())
            raise UserError(f"kubectl {' '.join(args[:3])} failed: {said}")
        return result

    def kubectl_json(self, *args: str) -> dict[str, Any]:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def apply(self, objects: list[dict[str, Any]], server_side: bool = False, force_conflicts: bool = False) -> None:
        """`kubectl apply` of OBJECTS; SERVER_SIDE as field manager trainstack (FORCE_CONFLICTS: its apply wins)."""
        extra = ["--server-side", "--field-manager=trainstack"] if server_side else []
        extra += ["--force-conflicts"] if server_side and force_conflicts else []
        self.kubectl("apply", *extra, "-f", "-", input_text=yamlio.dump_all(objects, sort_keys=False))
