"""The `existing` provider: the current kube context, as it is.

Without --install nothing is created: the suite checks what is there (CRDs, controllers,
webhooks through a server-side dry run, golden runtimes, policies). With --install the whole
suite runs, helm install and uninstall included. GPU smoke jobs run only when a node offers GPUs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ... import lock as lockmod
from ...errors import UserError, output_line
from ...kubectl import Kubectl
from ..smokejobs import is_gpu
from . import Provider


class ExistingProvider(Provider):
    name = "existing"
    job_timeout = 1200.0

    def __init__(
        self, lock: lockmod.Lock | None = None, install: bool = False, context: str | None = None, reason: str = ""
    ) -> None:
        self.lock = lock or lockmod.load()
        self.installs = install
        self.context = context
        self.reason = reason or "asked for with --provider existing"
        env = os.environ.get("KUBECONFIG", "")
        self.kubeconfig = Path(env.split(os.pathsep)[0]) if env else Path.home() / ".kube" / "config"
        self.kube: Kubectl | None = None
        self.gpu_nodes = 0

    def up(self, suite: Any) -> Kubectl:
        if self.kubeconfig is None or not self.kubeconfig.is_file():
            raise UserError(f"no kubeconfig at {self.kubeconfig}", "set KUBECONFIG or use --provider local")
        self.kube = Kubectl(self.kubeconfig, self.context, lock=self.lock)
        result = self.kube.kubectl("version", "-o", "json", check=False, timeout=20)
        if result.returncode != 0:
            raise UserError(
                f"the current context does not answer: {output_line(result.stderr)}",
                "check 'kubectl config current-context'",
            )
        nodes = self.kube.kubectl_json("get", "nodes")["items"]
        self.gpu_nodes = sum(1 for n in nodes if any("gpu" in k for k in (n["status"].get("capacity") or {})))
        return self.kube

    def describe(self) -> str:
        assert self.kube is not None
        context = self.context or self.kube.kubectl("config", "current-context", check=False).stdout.strip()
        return (
            f"context {context or '?'} ({'installing' if self.installs else 'read-only'}, {self.gpu_nodes} GPU nodes)"
        )

    def unsupported(self, jobs: list[Any]) -> dict[str, str]:
        if self.gpu_nodes:
            return {}
        return {j.name: "no node offers GPUs" for j in jobs if is_gpu(j.runtime)}
