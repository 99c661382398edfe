"""kubectl (the pinned one, else one on PATH within the skew policy) against one cluster (a kubeconfig and, optionally, a context)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import lock as lockmod
from . import proc, tools, yamlio
from .errors import UserError, output_line


class Kubectl:
    """Runs the pinned kubectl; `kubectl()` and `kubectl_json()` match LocalCluster's, so the suite takes either."""

    def __init__(
        self, kubeconfig: Path | None = None, context: str | None = None, lock: lockmod.Lock | None = None
    ) -> None:
        self.kubeconfig = kubeconfig
        self.context = context
        self.binary = tools.require_kubectl(lock)

    def base(self) -> list[str]:
        cmd = [str(self.binary)]
        if self.kubeconfig:
            cmd += ["--kubeconfig", str(self.kubeconfig)]
        if self.context:
            cmd += ["--context", self.context]
        return cmd

    def kubectl(
        self, *args: str, input_text: str | None = None, check: bool = True, timeout: float = 60
    ) -> proc.CompletedProcess:
        result = proc.run([*self.base(), *args], check=False, input=input_text, timeout=timeout,
                          what=f"kubectl {' '.join(args[:3])}")
        if check and result.returncode != 0:
            said = output_line(result.stderr or result.stdout, markers=())
            raise UserError(f"kubectl {' '.join(args[:3])} failed: {said}")
        return result

    def kubectl_json(self, *args: str) -> dict[str, Any]:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def apply(self, objects: list[dict[str, Any]], server_side: bool = False) -> None:
        extra = ["--server-side", "--field-manager=trainstack"] if server_side else []
        self.kubectl("apply", *extra, "-f", "-", input_text=yamlio.dump_all(objects, sort_keys=False))
