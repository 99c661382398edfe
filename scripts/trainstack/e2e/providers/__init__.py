"""Where the e2e suite's cluster comes from: `local`, `kind` or `existing`.

A provider only brings (and takes away) the cluster; the suite is the same for all. The hooks
below let a provider say what it cannot do (e.g. kind has no GPU nodes) instead of faking it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ... import proc
from ...errors import output_line

PROVIDERS = ("auto", "local", "kind", "existing")


class Provider:
    """Base: the defaults suit a cluster whose pods are real."""

    name = ""
    reason = ""  # why this provider was chosen (auto)
    context: str | None = None
    kubeconfig: Path | None = None
    job_timeout = 120.0
    can_fail_pods = False
    installs = True

    def up(self, suite: Any) -> Any:
        raise NotImplementedError

    def describe(self) -> str:
        return self.name

    def cluster_data(self) -> dict[str, Any]:
        """What the cluster step records of this provider's cluster, beside the server and kubelet versions."""
        return {}

    def while_installing(self, suite: Any, process: proc.Popen) -> str | None:
        """Runs while `helm install --wait` waits (the local provider starts its controllers here)."""
        return None

    def after_uninstall(self, suite: Any) -> None:
        return None

    def unsupported(self, jobs: list[Any]) -> dict[str, str]:
        """Smoke jobs this cluster cannot run -> why (reported as skipped, never as passed)."""
        return {}

    def logs(self) -> dict[str, Path]:
        return {}

    def down(self, keep: bool) -> str:
        return ""


def docker_answers(timeout: float = 10) -> tuple[bool, str]:
    """(True, '') when a Docker engine answers `docker version`, else (False, why)."""
    try:
        result = proc.run(["docker", "version", "--format", "{{.Server.Version}}"], check=False, timeout=timeout)
    except proc.CommandError as err:
        if err.missing:
            return False, "no docker command"
        return False, f"docker did not answer within {timeout:.0f}s"
    if result.returncode != 0 or not result.stdout.strip():
        return False, output_line(result.stderr, markers=(), empty="the Docker engine did not answer")
    return True, ""
