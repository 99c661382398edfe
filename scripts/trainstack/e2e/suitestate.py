"""What the suite's step mixins (PlatformChecks, WorkloadChecks, RealNodeSteps) use of the Suite they
are mixed into: its state and five of its methods, declared once so the type checker sees them. Suite
(suite.py) sets the state in its constructor and defines the methods."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import helm
from .. import lock as lockmod
from .smokejobs import SmokeJob


class SuiteState:
    provider: Any  # a Provider (e2e.providers): local, kind or existing
    env: str
    lock: lockmod.Lock
    kube: Any  # the provider's kubectl runner (LocalCluster or kubectl.Kubectl)
    rendered: list[dict[str, Any]]
    jobs: list[SmokeJob]
    failed_job: SmokeJob | None
    job_labels: dict[str, str]
    run_dir: Path
    install_args: list[str]

    if TYPE_CHECKING:  # defined by Suite
        def api(self) -> Any: ...

        def read(self, plural: str, namespace: str | None = None, **selectors: Any) -> list[dict[str, Any]]: ...

        def place(self, job: SmokeJob) -> SmokeJob: ...

        def release(self, binary: str = "helm") -> helm.Release: ...

        def wait_trainjobs(self, expected: dict[str, str], timeout: float) -> dict[str, dict]: ...
