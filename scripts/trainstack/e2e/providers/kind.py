"""The `kind` provider: a kind cluster of e2e/kind-config.yaml's nodes (one control plane, two workers).

Two ways to the same cluster, chosen by `plan()` from the lock:

- **published** (users' CI: a hosted runner with Docker and the internet): kind's published node image, pinned
  by digest (lock `kubernetes.kindNodeImage`), the upstream controllers' and the golden runtimes' published
  images, each pulled into the Docker engine that answers and `kind load`ed. Nothing is built from source.
- **assembled** (no Docker engine answers, as on this project's machines): a private engine in namespaces of
  its own, a node image assembled from pinned parts for the lock's Kubernetes version, and every image from
  the cluster's mirror, built here like the local provider's (cluster/kind.py).

kind has no GPU nodes, so the GPU runtimes' smoke jobs are reported as skipped, never faked.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ... import images, paths, proc, progress, tools
from ... import lock as lockmod
from ...errors import UserError, output_line
from ...kubectl import Kubectl
from ..smokejobs import golden_runtimes, is_gpu, pod_specs
from . import Provider, docker_answers

CONFIG = Path("e2e") / "kind-config.yaml"
CLUSTER = "trainstack-e2e"
PUBLISHED, ASSEMBLED = "published", "assembled"


def needed_images(lock: lockmod.Lock, rendered: list[dict[str, Any]]) -> list[str]:
    """Images of the rendered Deployments and of the CPU golden runtimes (what pods will pull)."""
    found: list[str] = []
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
                if container.get("image") and container["image"] not in found:
                    found.append(container["image"])
    return found


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


@dataclass(frozen=True)
class Plan:
    """How the kind cluster comes about: PUBLISHED or ASSEMBLED (or '' when neither can), its node image, why."""

    mode: str
    node_image: str
    why: str
    published: str = ""  # why the published path can or cannot run (what `auto` says)


def decide(lock: lockmod.Lock, docker: tuple[bool, str], published: tuple[bool, str] | None,
           assembled: tuple[bool, str]) -> Plan:
    """The plan from what was found: DOCKER (an engine answers, why not), PUBLISHED (the published node image
    could be had; None when not asked, there being no engine) and ASSEMBLED (this host can run the private
    engine and assemble the image). The published image is the lock's kindNodeImage by digest; the assembled
    one is built for the lock's kubernetes.version."""
    node = lock.kind_node_image().reference()
    if docker[0] and published is not None and published[0]:
        said = f"a Docker engine answers and {node} is available ({published[1]})"
        return Plan(PUBLISHED, node, said, said)
    missing = f"no Docker engine ({docker[1]})" if not docker[0] else \
        f"{node} cannot be had ({published[1] if published else 'not tried'})"
    assembled_image = f"trainstack/kind-node:{lock.kubernetes_version} (assembled here)"
    if assembled[0]:
        return Plan(ASSEMBLED, assembled_image, f"{missing}: a private engine and {assembled_image}", missing)
    return Plan("", "", f"{missing}, and no private engine here ({assembled[1]})", missing)


def can_assemble() -> tuple[bool, str]:
    """Can this host run the private engine? Root (namespaces, cgroups), Debian's apt-get and mmdebstrap."""
    if os.geteuid() != 0:
        return False, "not root"
    for command in ("apt-get", "dpkg-deb", "ip", "nsenter", "unshare", "iptables"):
        if not shutil.which(command):
            return False, f"no {command} on PATH"
    return True, "root, apt-get and the namespace tools"


def plan(lock: lockmod.Lock, pull: bool = True) -> Plan:
    docker = docker_answers()
    published = image_available(lock.kind_node_image().reference(), pull=pull, timeout=300) if docker[0] else None
    return decide(lock, docker, published, can_assemble())


def viable(lock: lockmod.Lock) -> tuple[bool, str]:
    """Can kind run here (auto)? Only where an engine answers and the published image can be had: the assembled
    path needs minutes of builds, which `auto` does not choose on its own."""
    chosen = plan(lock)
    return chosen.mode == PUBLISHED, chosen.published


class KindProvider(Provider):
    name = "kind"
    job_timeout = 1200.0  # real pods pull real images
    real_pods = True  # every smoke job runs containers (small requests: suite.REAL_SMOKE_RESOURCES)

    def __init__(self, run_dir: Path, lock: lockmod.Lock | None = None, reason: str = "",
                 chosen: Plan | None = None) -> None:
        self.run_dir = run_dir
        self.lock = lock or lockmod.load()
        self.plan = chosen or plan(self.lock)
        if not self.plan.mode:
            raise UserError(f"kind provider: {self.plan.why}; nothing was run",
                            "start Docker, run as root on Debian, or use --provider local")
        self.reason = reason or f"asked for with --provider kind: {self.plan.why}"
        self.kubeconfig = run_dir / "kubeconfig"
        self.created = False
        self.cluster: Any = None  # cluster.kind.KindCluster on the assembled path
        self.memory: Any = None  # its sandbox's resident memory, sampled while it runs (e2e/memory.py)
        self.memory_report: dict[str, Any] = {}

    @property
    def assembled(self) -> bool:
        return self.plan.mode == ASSEMBLED

    @property
    def real(self) -> bool:
        """The real-node steps (training across nodes, the checkpoint, a killed worker, helm test) run on the
        assembled path's workers, whose images are the mirror's; the published path runs the smoke jobs only."""
        return self.assembled

    @property
    def can_fail_pods(self) -> bool:  # type: ignore[override]
        """A real container that exits 3 ends its TrainJob Failed (the assembled path's python image has python)."""
        return self.assembled

    def is_real(self, job: Any) -> bool:
        return not is_gpu(job.runtime)

    def placement(self, job: Any) -> tuple[dict[str, str], list[dict[str, Any]]]:
        return {}, []  # the workers (the control plane's taint keeps pods off it)

    def values_files(self) -> list[Path]:
        """The assembled path takes every image from the cluster's mirror, as the local provider's real nodes do."""
        if not self.assembled:
            return []
        from .local import mirror_values

        self.run_dir.mkdir(parents=True, exist_ok=True)
        return [mirror_values(self.lock, self.run_dir / "values-kind.yaml")]

    def needed_builds(self, suite: Any) -> list[str]:
        wanted = ["pause", "coredns", "trainer-controller-manager", "jobset-controller", "python",
                  *suite.workload_images, *(["lws-controller"] if suite.data_cache else [])]
        return [n for n in images.names(self.lock) if n in wanted]

    def up(self, suite: Any) -> Any:
        if self.assembled:
            from ...cluster.kind import KindCluster

            self.cluster = KindCluster(CLUSTER, self.run_dir / "kind", self.lock, self.needed_builds(suite),
                                       paths.repo_root() / CONFIG, workload_images=suite.workload_images)
            self.created = True
            self.cluster.start()
            self.kubeconfig = self.cluster.kubeconfig
            from ..memory import MemorySampler

            # every process of the engine's sandbox: dockerd, the registry, each node's systemd, containerd,
            # kubelet, control plane and pods (the nodes' cgroups are below the sandbox's)
            self.memory = MemorySampler({"engine, registry and kind nodes": self.cluster.sandbox}).start()
            return Kubectl(self.kubeconfig, lock=self.lock)
        return self._up_published(suite)

    def _kind(self, *args: str, timeout: float = 600) -> proc.CompletedProcess:
        return proc.run([str(tools.require("kind", self.lock)), *args], check=False, timeout=timeout)

    def _up_published(self, suite: Any) -> Any:
        ok, why = docker_answers()
        if not ok:
            raise UserError(f"kind provider: no Docker engine answers ({why}); nothing was run",
                            "start Docker, or use --provider local")
        wanted = needed_images(self.lock, suite.rendered)
        node = self.plan.node_image
        for image in [node, *wanted]:
            with progress.step(f"image {image}"):
                ok, why = image_available(image)
            if not ok:
                raise UserError(
                    f"kind provider: image {image} cannot be had here ({why}); nothing was run",
                    "pre-pull or load the images (air-gapped: mirror them), or use --provider local",
                )
        config = paths.repo_root() / CONFIG
        result = self._kind("create", "cluster", "--name", CLUSTER, "--config", str(config), "--image", node,
                            "--kubeconfig", str(self.kubeconfig), "--wait", "300s", timeout=900)
        self.created = True
        if result.returncode != 0:
            raise UserError(f"kind create cluster failed: {output_line(result.stderr)}")
        for image in wanted:
            loaded = self._kind("load", "docker-image", image, "--name", CLUSTER)
            if loaded.returncode != 0:
                raise UserError(f"kind load docker-image {image} failed: {output_line(loaded.stderr)}")
        return Kubectl(self.kubeconfig, lock=self.lock)

    def describe(self) -> str:
        if self.assembled and self.cluster is not None:
            nodes = ", ".join(self.cluster.node_names())
            return (f"kind cluster {CLUSTER} ({nodes}), node image {self.cluster.node_image} assembled here, "
                    f"private Docker engine in {self.cluster.sandbox.netns}, API server 127.0.0.1:{self.cluster.api_port}")
        return f"kind cluster {CLUSTER}, node image {self.plan.node_image}"

    def cluster_data(self) -> dict[str, Any]:
        if self.cluster is None:
            return {"kind": {"path": self.plan.mode, "node_image": self.plan.node_image}}
        return {"kind": {"path": self.plan.mode, "node_image": self.cluster.node_image, "nodes": self.cluster.node_names(),
                         "seconds": self.cluster.timings}}

    def unsupported(self, jobs: list[Any]) -> dict[str, str]:
        return {j.name: "kind has no GPU nodes" for j in jobs if is_gpu(j.runtime)}

    def logs(self) -> dict[str, Path]:
        if not self.created:
            return {}
        out = self.run_dir / "kind-logs"
        if self.cluster is not None:
            return self.cluster.export_logs(out)
        self._kind("export", "logs", str(out), "--name", CLUSTER)
        return {p.relative_to(out).as_posix().replace("/", "_"): p for p in out.rglob("*.log")}

    def down(self, keep: bool) -> str:
        if self.memory is not None:
            self.memory_report, self.memory = self.memory.stop(), None
        if not self.created:
            return ""
        if self.cluster is not None:
            if keep:
                self.cluster.sandbox.keep()
                return (f"kept: export KUBECONFIG={self.kubeconfig}; the engine's socket is {self.cluster.engine.socket}; "
                        f"remove it with 'trainstack e2e down'")
            left = self.cluster.stop()
            if left:
                raise UserError(f"the kind cluster's sandbox left: {', '.join(left)}")
            took = ", ".join(f"{k.removeprefix('teardown: ')} {v:.1f}s" for k, v in self.cluster.timings.items()
                             if k.startswith("teardown"))
            return f"deleted kind cluster {CLUSTER}, its engine and its namespaces ({took})"
        if keep:
            return f"kept: export KUBECONFIG={self.kubeconfig}; delete it with 'kind delete cluster --name {CLUSTER}'"
        result = self._kind("delete", "cluster", "--name", CLUSTER)
        if result.returncode != 0:
            raise UserError(f"kind delete cluster failed: {output_line(result.stderr)}")
        return f"deleted kind cluster {CLUSTER}"
