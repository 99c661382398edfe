"""The `kind` provider: a kind cluster from e2e/kind-config.yaml, the pinned node image and images.

What users run in their CI (.github/workflows/e2e-kind.yaml). Every image the chart and the smoke
TrainJobs need must be in the local Docker engine or pullable; each is then `kind load`ed. When
one cannot be had, the provider stops with a message naming it: nothing is faked. kind has no GPU
nodes, so GPU runtimes' smoke jobs are reported as skipped, and pods are not failed on purpose.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ... import lock as lockmod
from ... import paths, proc, progress, tools
from ...errors import UserError, output_line
from ...kubectl import Kubectl
from ..smokejobs import golden_runtimes, is_gpu, pod_specs
from . import Provider, docker_answers

CONFIG = Path("e2e") / "kind-config.yaml"
CLUSTER = "trainstack-e2e"


def needed_images(lock: lockmod.Lock, rendered: list[dict[str, Any]]) -> list[str]:
    """Images of the rendered Deployments and of the CPU golden runtimes (what pods will pull)."""
    images: list[str] = []
    for obj in rendered:
        specs = []
        if obj.get("kind") == "Deployment":
            specs.append(obj["spec"]["template"]["spec"])
        if (
            obj.get("kind") == "ClusterTrainingRuntime"
            and obj in golden_runtimes(rendered)
            and not is_gpu(obj)
        ):
            specs += pod_specs(obj)
        for spec in specs:
            for container in spec.get("initContainers", []) + spec.get("containers", []):
                if container.get("image") and container["image"] not in images:
                    images.append(container["image"])
    return images


def image_available(image: str, pull: bool = True, timeout: float = 900) -> tuple[bool, str]:
    try:
        if proc.run(["docker", "image", "inspect", image], check=False, timeout=30).returncode == 0:
            return True, "present"
        if not pull:
            return False, "not in the local Docker engine"
        result = proc.run(["docker", "pull", "-q", image], check=False, timeout=timeout)
    except proc.CommandError as err:
        if err.missing:  # no docker command: the caller has asked docker_answers() first
            raise
        return False, f"docker pull did not finish within {timeout:.0f}s"
    if result.returncode != 0:
        return False, output_line(result.stderr, markers=(), empty="docker pull failed")
    return True, "pulled"


def viable(lock: lockmod.Lock) -> tuple[bool, str]:
    """Can kind run here? Docker must answer, kind be installed and the node image be obtainable."""
    ok, why = docker_answers()
    if not ok:
        return False, f"no Docker engine ({why})"
    if tools.find("kind", lock) is None:
        return False, "kind is not installed (trainstack tools install kind)"
    node = lock.kind_node_image().reference()
    ok, why = image_available(node, timeout=300)
    if not ok:
        return False, f"node image {node} cannot be had: {why}"
    return True, f"Docker answers and {node} is available"


class KindProvider(Provider):
    name = "kind"
    job_timeout = 1200.0  # real pods pull real images

    def __init__(self, run_dir: Path, lock: lockmod.Lock | None = None, reason: str = "") -> None:
        self.run_dir = run_dir
        self.lock = lock or lockmod.load()
        self.reason = reason or "asked for with --provider kind"
        self.kubeconfig = run_dir / "kubeconfig"
        self.created = False

    def _kind(self, *args: str, timeout: float = 600) -> proc.CompletedProcess:
        return proc.run([str(tools.require("kind", self.lock)), *args], check=False, timeout=timeout)

    def up(self, suite: Any) -> Any:
        ok, why = docker_answers()
        if not ok:
            raise UserError(
                f"kind provider: no Docker engine answers ({why}); nothing was run",
                "start Docker, or use --provider local",
            )
        images = needed_images(self.lock, suite.rendered)
        node = self.lock.kind_node_image().reference()
        for image in [node, *images]:
            with progress.step(f"image {image}"):
                ok, why = image_available(image)
            if not ok:
                raise UserError(
                    f"kind provider: image {image} cannot be had here ({why}); nothing was run",
                    "pre-pull or load the images (air-gapped: mirror them), or use --provider local",
                )
        config = paths.repo_root() / CONFIG
        result = self._kind(
            "create",
            "cluster",
            "--name",
            CLUSTER,
            "--config",
            str(config),
            "--image",
            node,
            "--kubeconfig",
            str(self.kubeconfig),
            "--wait",
            "180s",
        )
        self.created = True
        if result.returncode != 0:
            raise UserError(f"kind create cluster failed: {output_line(result.stderr)}")
        for image in images:
            loaded = self._kind("load", "docker-image", image, "--name", CLUSTER)
            if loaded.returncode != 0:
                raise UserError(f"kind load docker-image {image} failed: {output_line(loaded.stderr)}")
        return Kubectl(self.kubeconfig, lock=self.lock)

    def describe(self) -> str:
        return f"kind cluster {CLUSTER}, node image {self.lock.kind_node_image().reference()}"

    def unsupported(self, jobs: list[Any]) -> dict[str, str]:
        return {j.name: "kind has no GPU nodes" for j in jobs if is_gpu(j.runtime)}

    def logs(self) -> dict[str, Path]:
        if not self.created:
            return {}
        out = self.run_dir / "kind-logs"
        self._kind("export", "logs", str(out), "--name", CLUSTER)
        return {p.relative_to(out).as_posix().replace("/", "_"): p for p in out.rglob("*.log")}

    def down(self, keep: bool) -> str:
        if not self.created:
            return ""
        if keep:
            return f"kept: export KUBECONFIG={self.kubeconfig}; delete it with 'kind delete cluster --name {CLUSTER}'"
        result = self._kind("delete", "cluster", "--name", CLUSTER)
        if result.returncode != 0:
            raise UserError(f"kind delete cluster failed: {output_line(result.stderr)}")
        return f"deleted kind cluster {CLUSTER}"
