"""The `local` provider: a real control plane and the upstream controllers as local processes.

The cluster is a LocalCluster (pinned etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
KWOK) with a CPU pool and one pool per accelerator the golden runtimes ask for, labelled and tainted
the way those runtimes select and tolerate. After `helm install` has created the chart's objects,
and while it waits for them, the chart's controllers start as local processes (see
hostcontrollers): that step rewrites the webhook Services and configurations so the API server can
reach them, and says so in its result. Pods never run: KWOK completes (or fails) them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import yaml

from ... import images, paths, proc, progress, tools
from ... import lock as lockmod
from ...cluster import addons, sandbox
from ...cluster import node as nodemod
from ...cluster.local import GPU_RESOURCE, PORT_NAMES, LocalCluster, NodePool, pid_alive, stop_pids
from ...errors import UserError
from .. import isolation as isolationmod
from .. import tracking as trackingmod
from ..base import NAMESPACE
from ..hostcontrollers import CONTROLLER_IMAGES, HostControllers
from ..memory import MemorySampler, sampler_for
from ..smokejobs import accelerators, golden_runtimes, is_gpu, node_selector, pod_specs, tolerations
from . import Provider


def state_dir() -> Path:
    return paths.cache_dir() / "e2e" / "state"


def pools_for(runtimes: list[dict[str, Any]]) -> list[NodePool]:
    """A CPU pool plus, per accelerator resource the runtimes request, a pool those runtimes select and tolerate."""
    pools = [NodePool("cpu", count=2)]
    wanted: dict[str, list[dict[str, Any]]] = {}
    for runtime in runtimes:
        for resource in accelerators(runtime):
            wanted.setdefault(resource, []).append(runtime)
    wanted.setdefault(GPU_RESOURCE, [])
    for resource, users in sorted(wanted.items()):
        labels: dict[str, str] = {}
        taints: list[dict[str, str]] = []
        for runtime in users:
            labels.update(node_selector(runtime))
            for tol in tolerations(runtime):
                if tol.get("key") and tol.get("effect", "NoSchedule") in ("NoSchedule", ""):
                    taint = {"key": tol["key"], "value": tol.get("value") or "present", "effect": "NoSchedule"}
                    if taint not in taints:
                        taints.append(taint)
        if not users:
            labels = {"nvidia.com/gpu.present": "true"}
        if not taints:  # the usual GPU taint: a runtime that does not tolerate it will not schedule (and we see it)
            taints = [{"key": resource, "value": "present", "effect": "NoSchedule"}]
        name = "gpu" if resource == GPU_RESOURCE else resource.split(".")[0].split("/")[0] + "-gpu"
        pools.append(NodePool(name, count=2, extended={resource: "8"}, labels=labels, taints=tuple(taints)))
    return pools


NODE_MODES = ("kwok", "real", "both")
# Real nodes by default: two, so that a two-node TrainJob's pods run on two machines and talk across them.
DEFAULT_REAL_NODES = 2
SIMULATED_TAINT = {"key": "trainstack.io/simulated", "value": "true", "effect": "NoSchedule"}
REAL_NODE_TOOLS = ("kubelet", "kube-proxy", "kube-router", "containerd", "registry", "crane", "coredns")


def real_node_built(lock: lockmod.Lock) -> bool:
    """True when every pinned part of the real node is in the tool cache."""
    return all(tools.find(binary, lock) for binary in REAL_NODE_TOOLS)


def default_nodes(lock: lockmod.Lock) -> str:
    return "both" if real_node_built(lock) else "kwok"


def simulated_pools(pools: list[NodePool], nodes: str) -> list[NodePool]:
    """KWOK pools beside a real node. An untainted (CPU) pool gets a taint, so that only smoke jobs
    patched for it land there, never the chart's controllers; the GPU pools keep their GPU taint,
    which the GPU runtimes tolerate (so a TrainJob the SDK submits unpatched lands there too)."""
    if nodes == "real":
        return []
    if nodes == "kwok":
        return pools
    return [p if p.taints else NodePool(p.name, p.count, p.cpu, p.memory, p.pods, dict(p.extended), dict(p.labels),
                                        (SIMULATED_TAINT,)) for p in pools]


def mirror_values(lock: lockmod.Lock, path: Path, tracking: bool = False, tracked: tuple[str, ...] = ()) -> Path:
    """Helm values for the real node: every image from the cluster's registry, CPU sizes that fit
    one 2-core node, the torch runtimes on the CPU torch image built here, mlx-distributed-cpu on
    the MLX image built here (upstream has none), output volumes on; with
    TRACKING, the MLflow tracking server for the e2e's namespaces and TRACKED on a small claim."""
    mirror = nodemod.MIRROR
    torch_repo, torch_tag = images.repository_tag("torch-cpu", lock)
    mlx_repo, mlx_tag = images.repository_tag("mlx-cpu", lock)
    small = {"cpu": "500m", "memory": "1536Mi"}
    values = {
        "global": {"imageRegistry": mirror},
        "kubeflow-trainer": {"image": {"registry": mirror}},
        "jobset": {"image": {"repository": f"{mirror}/{lock.image('jobset-controller').repository}"}},
        "lws": {"image": {"manager": {"repository": f"{mirror}/{lock.image('lws-controller').repository}"}}},
        "images": {"torch": {"registry": mirror, "repository": torch_repo, "tag": torch_tag, "digest": ""},
                   "mlx-cpu": {"registry": mirror, "repository": mlx_repo, "tag": mlx_tag, "digest": ""}},
        "runtimes": {
            "mlxCpu": {"enabled": True},
            "cpu": {"resources": {"requests": dict(small), "limits": dict(small)}},
            "defaults": {"output": {"enabled": True, "size": "1Gi", "storageClassName": addons.STORAGE_CLASS,
                                    "accessModes": ["ReadWriteOnce"]}},
        },
    }
    if tracking:
        values["tracking"] = {**trackingmod.values(extra=tracked)["tracking"],
                              "storage": {"size": "1Gi", "storageClassName": addons.STORAGE_CLASS}}
    path.write_text("# written by trainstack e2e for the local cluster's real node\n" + yaml.safe_dump(values))
    return path


def controller_binaries(rendered: list[dict[str, Any]], lock: lockmod.Lock) -> list[str]:
    """Pinned controller binaries for the Deployments the chart renders (matched by image)."""
    repos = {name: lock.image(name).repository for name in CONTROLLER_IMAGES}
    found = []
    for obj in rendered:
        if obj.get("kind") != "Deployment":
            continue
        for container in obj["spec"]["template"]["spec"].get("containers", []):
            repo = container.get("image", "").split("@")[0].rsplit(":", 1)[0]
            found += [name for name, r in repos.items() if repo.endswith(r) and name not in found]
    return found


# below this much free disk a real-node run warns (the node stores its images under the cache)
LOW_DISK_GIB = 6


class LocalProvider(Provider):
    name = "local"
    can_fail_pods = True
    job_timeout = 120.0

    def __init__(
        self,
        run_dir: Path,
        lock: lockmod.Lock | None = None,
        port_base: int | None = None,
        controller_args: dict[str, list[str]] | None = None,
        reason: str = "",
        nodes: str = "kwok",
        real_nodes: int = DEFAULT_REAL_NODES,
        tracking: bool = False,
        tracked: tuple[str, ...] = (),
        isolation: bool = False,
    ) -> None:
        self.run_dir = run_dir
        self.lock = lock or lockmod.load()
        self.port_base = port_base
        self.controller_args = controller_args or {}
        self.reason = reason or "no Docker needed: a real control plane from the pinned binaries, KWOK nodes"
        self.cluster: LocalCluster | None = None
        self.controllers: HostControllers | None = None
        self.nodes = nodes
        self.real_nodes = real_nodes if nodes != "kwok" else 0
        self.tracking = tracking and nodes != "kwok"  # the MLflow server runs on a real node
        self.tracked = tuple(tracked)  # namespaces tracked beside the e2e's own (created before the install)
        self.tracking_namespaces = trackingmod.namespaces(self.tracked) if self.tracking else []
        # the real nodes enforce NetworkPolicy (kube-router, cluster/netpol.py): with ISOLATION (and tracking) the
        # values add the teams and monitoring whose isolation the suite probes (e2e/isolation.py)
        self.isolation = isolation and self.tracking
        self.memory: MemorySampler | None = None
        self.memory_report: dict[str, Any] = {}  # the cluster's peak resident memory, once it is down
        if nodes != "kwok":
            self.job_timeout = 300.0  # the first run on a machine pulls the torch image into containerd
            self.reason = reason or "a real node (kubelet + containerd in the cluster's own namespaces) beside KWOK pools"

    @property
    def real(self) -> bool:
        return self.nodes != "kwok"

    def values_files(self) -> list[Path]:
        """Extra helm values this cluster needs (the mirror, sizes that fit the real node)."""
        if not self.real:
            return []
        self.run_dir.mkdir(parents=True, exist_ok=True)
        files = [mirror_values(self.lock, self.run_dir / "values-real-node.yaml", tracking=self.tracking,
                               tracked=self.tracked)]
        if self.isolation:
            files.append(self.run_dir / "values-isolation.yaml")
            files[-1].write_text("# written by trainstack e2e: the teams the isolation step probes\n"
                                 + yaml.safe_dump(isolationmod.values()))
        return files

    def up(self, suite: Any) -> LocalCluster:
        for binary in controller_binaries(suite.rendered, self.lock):  # a missing one fails before anything starts
            tools.require(binary, self.lock)
        if self.real:
            for binary in REAL_NODE_TOOLS:
                tools.require(binary, self.lock)
            sandbox.check_host()
            free = shutil.disk_usage(paths.cache_dir()).free
            if free < LOW_DISK_GIB * 2**30:
                progress.info(f"  warning: {free / 2**30:.1f} GiB free on the disk of {paths.cache_dir()} "
                              f"(under {LOW_DISK_GIB}): the nodes' new image layers, pod logs and etcd go there, "
                              f"and below 256 MiB free the kubelet evicts pods")
            for line in sandbox.cleanup_stale():
                progress.info(f"  {line} (left by an earlier run)")
        pools = simulated_pools(pools_for(golden_runtimes(suite.rendered)), self.nodes)
        self.cluster = LocalCluster(
            name=cluster_name(self.run_dir),
            workdir=self.run_dir / "kwok",
            pools=pools,
            port_base=self.port_base,
            cert_sans=(f"*.{NAMESPACE}.svc",),
            host_namespaces=() if self.real else (NAMESPACE,),
            lock=self.lock,
            real_node=self.real,
            real_nodes=self.real_nodes,
            image_names=self.needed_images(suite) if self.real else None,
        )
        self._save_state()
        self.cluster.start()
        self.kubeconfig = self.cluster.kubeconfig
        self._save_state()
        self.memory = sampler_for(self.cluster)
        return self.cluster

    def describe(self) -> str:
        assert self.cluster is not None
        pools = ", ".join(
            f"{p.name}: {p.count} nodes"
            + (f" {','.join(f'{k}={v}' for k, v in p.extended.items())}" if p.extended else "")
            + (f" labels {p.labels}" if p.labels else "")
            + (f" taints {[t['key'] + ':' + t['effect'] for t in p.taints]}" if p.taints else "")
            for p in self.cluster.pools
        )
        real = ""
        if self.real:
            real = (f"real nodes {self.node_lines()} (kubelet + containerd each); "
                    f"registry {nodemod.MIRROR} (host 127.0.0.1:{self.cluster.registry_port}); ")
        return f"kube-apiserver {self.cluster.server()}; {real}KWOK {pools or 'none'}"

    def needed_images(self, suite: Any) -> list[str]:
        # python: the chart's `helm test` pod (and the base layer of the framework images)
        wanted = ["pause", "coredns", "trainer-controller-manager", "jobset-controller", "python",
                  *suite.workload_images]
        if suite.data_cache:
            wanted.append("lws-controller")
        if self.tracking:
            wanted.append("mlflow")
        return [n for n in images.names(self.lock) if n in wanted]

    def is_real(self, job: Any) -> bool:
        """A smoke job runs for real when it needs no GPU and every image it uses was built here."""
        if not self.real or self.cluster is None or is_gpu(job.runtime):
            return False
        built = {b.reference for b in self.cluster.built_images}
        used = {c.get("image", "") for spec in pod_specs(job.runtime)
                for c in spec.get("containers", []) + spec.get("initContainers", [])}
        return bool(used) and used <= built

    def unsupported(self, jobs: list[Any]) -> dict[str, str]:
        if self.nodes != "real":
            return {}
        return {j.name: "no KWOK pool with --nodes real and no image built for it" for j in jobs if not self.is_real(j)}

    def placement(self, job: Any) -> tuple[dict[str, str], list[dict[str, Any]]]:
        """nodeSelector and tolerations that put a smoke job on the real node or on the KWOK pools."""
        if not self.real:
            return {}, []
        if self.is_real(job):
            return {"trainstack.io/node": "real"}, []
        return {"type": "kwok"}, [{"key": SIMULATED_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}]

    def while_installing(self, suite: Any, process: proc.Popen) -> str:
        assert self.cluster is not None
        if self.real:
            return "the chart's controllers run as pods on the real node, images pulled from the cluster's registry"
        wanted = {
            (o["kind"], o["metadata"]["name"])
            for o in suite.rendered
            if o.get("kind") in ("Deployment", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
        }
        deadline = time.monotonic() + 120
        while True:  # helm creates every object, then waits: start the controllers once they exist
            if process.poll() is not None:
                return ""
            have = set()
            for kind in ("deployments", "mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
                args = ["get", kind, "-o", "json"] + (["-n", NAMESPACE] if kind == "deployments" else [])
                result = self.cluster.kubectl(*args, check=False)
                if result.returncode == 0:
                    for item in json.loads(result.stdout)["items"]:
                        have.add((item["kind"], item["metadata"]["name"]))
            if wanted <= have:
                break
            if time.monotonic() > deadline:
                raise UserError(f"helm install has not created {sorted(wanted - have)} within 120s")
            time.sleep(0.3)
        base = None if self.port_base is None else self.port_base + len(PORT_NAMES)
        self.controllers = HostControllers(
            self.cluster,
            NAMESPACE,
            self.run_dir / "controllers",
            port_base=base,
            extra_args=self.controller_args,
        )
        self.controllers.prepare()
        changed = self.controllers.point_webhooks_here()
        self.controllers.start()
        self._save_state()
        last = [0.0]

        def waiting(names: list[str]) -> None:
            if time.monotonic() - last[0] > 5:
                progress.info(f"  waiting for local controllers: {', '.join(names)}")
                last[0] = time.monotonic()

        self.controllers.wait_ready(timeout=90, on_wait=waiting)
        self.controllers.start_kubelet()
        running = ", ".join(
            f"{c.deployment} ({c.binary_name}, pid {c.pid}, webhook 127.0.0.1:{c.webhook_port})"
            for c in self.controllers.controllers
        )
        services = sum(1 for c in changed if c.startswith("service/"))
        return (
            f"adapted for local controllers: {services} webhook Service(s) -> ExternalName 127.0.0.1, "
            f"{len(changed) - services} webhook configuration(s) -> local port + CA bundle; running {running}"
        )

    def after_uninstall(self, suite: Any) -> None:
        if self.controllers is not None:
            self.controllers.stop()

    def logs(self) -> dict[str, Path]:
        out: dict[str, Path] = {}
        if self.cluster is not None and self.cluster.logs_dir.is_dir():
            out.update({p.stem: p for p in self.cluster.logs_dir.glob("*.log")})
        if self.controllers is not None:
            out.update(self.controllers.logs())
        for node in getattr(self.cluster, "nodes", None) or []:
            # every real node's daemons (real-0 also runs the registry), and every container's log as its
            # kubelet wrote it: pods/<namespace>_<pod>_<uid>/<container>/<n>.log
            out.update({f"{node.name}-{name}": path for name, path in node.logs().items()})
            for path in sorted((node.dir / "pods").glob("*/*/*.log")):
                out[f"pod-{path.parent.parent.name.rsplit('_', 1)[0]}-{path.parent.name}-{path.stem}"] = path
        return out

    def node_lines(self) -> str:
        """Each real node: name, address, pod subnet and network namespace."""
        nodes = getattr(self.cluster, "nodes", None) or []
        return ", ".join(f"{n.name} {n.ip} pods {n.pod_subnet} netns {n.sandbox.netns}" for n in nodes)

    def real_node_state(self) -> list[dict[str, Any]]:
        """What `trainstack node status` shows of a kept cluster's real nodes: each one's parts and pids."""
        return [{"name": n.name, "ip": n.ip, "podCIDR": n.pod_subnet, "netns": n.sandbox.netns,
                 "logs": str(n.logs_dir), "pids": {name: p.pid for name, p in n.procs.items()}}
                for n in getattr(self.cluster, "nodes", None) or []]

    def pids(self) -> dict[str, int]:
        out: dict[str, int] = {}
        if self.cluster is not None:
            out.update(self.cluster.pids())
        if self.controllers is not None:
            out.update(self.controllers.pids())
        return out

    def state_file(self) -> Path:
        return state_dir() / f"{self.run_dir.name}.json"

    def _save_state(self, kept: bool = False) -> None:
        """What `trainstack e2e down` needs to stop this cluster if we keep it or die before teardown."""
        if self.cluster is None:
            return
        path = self.state_file()
        path.parent.mkdir(parents=True, exist_ok=True)
        state = {
            "cluster": self.cluster.name,
            "workdir": str(self.cluster.workdir),
            "run_dir": str(self.run_dir),
            "kubeconfig": str(self.cluster.kubeconfig),
            "owner_pid": os.getpid(),
            "kept": kept,
            "controllers": self.controllers.pids() if self.controllers else {},
            "real_nodes": self.real_node_state(),
        }
        path.write_text(json.dumps(state, indent=2))

    def down(self, keep: bool) -> str:
        if self.memory is not None:
            self.memory_report, self.memory = self.memory.stop(), None
        if keep and self.cluster is not None:
            self._save_state(kept=True)
            for box in [self.cluster.sandbox, *(n.sandbox for n in self.cluster.nodes)]:
                if box is not None:
                    box.keep()
            reach = ""
            if self.real and self.cluster.sandbox is not None:
                reach = (f"API server 127.0.0.1:{self.cluster.ports()['kube-apiserver']} and registry "
                         f"127.0.0.1:{self.cluster.registry_port} forwarded into the cluster's namespace "
                         f"(enter it: nsenter --net={self.cluster.sandbox.netns_path}); real nodes: "
                         f"{self.node_lines()}; ")
            return (
                f"kept: export KUBECONFIG={self.cluster.kubeconfig}; kubectl get nodes,trainjobs -A; "
                f"{reach}remove it with 'trainstack e2e down'"
            )
        pids = self.pids()
        if self.controllers is not None:
            self.controllers.stop()
        left: list[str] = []
        if self.cluster is not None:
            self.cluster.stop(remove=False)
            left += getattr(self.cluster, "left_behind", [])
        stop_pids(list(pids.values()))
        left += [f"{name} (pid {pid})" for name, pid in pids.items() if pid_alive(pid)]
        self.state_file().unlink(missing_ok=True)
        if left:
            raise UserError(f"processes still running after teardown: {', '.join(left)}")
        return f"stopped {len(pids)} processes"


def cluster_name(run_dir: Path) -> str:
    """The local cluster's name for RUN_DIR, which its sandboxes' names start with: unique per run directory
    (two runs in one process, or of equal pids, never share a name)."""
    return f"trainstack-e2e-{hashlib.sha256(str(run_dir.resolve()).encode()).hexdigest()[:6]}"


def down_kept(provider: str | None = None) -> str:
    """`trainstack e2e down`: stop the clusters kept with --keep (or left by a run that died), by recorded pid;
    with PROVIDER `kind`, only the kind provider's (its engines' sandboxes and data), else every provider's."""
    from ...cluster.kind import SANDBOX_PREFIX, remove_leftovers

    if provider == "kind":
        stopped = sandbox.cleanup_stale(include_kept=True, kind=SANDBOX_PREFIX) + remove_leftovers()
        return f"stopped and removed: {', '.join(stopped)}" if stopped else "nothing to stop: no kind engine left"
    stopped = []
    for path in sorted(state_dir().glob("*.json")) if state_dir().is_dir() else []:
        state = json.loads(path.read_text())
        if not state.get("kept") and pid_alive(int(state.get("owner_pid", 0) or 0)):
            continue  # a run in progress tears itself down
        cluster = LocalCluster(name=state["cluster"], workdir=Path(state["workdir"]))
        cluster.started = True
        controllers = [int(p) for p in state.get("controllers", {}).values()]
        pids = list(cluster.pids().values()) + controllers
        stop_pids(controllers)
        cluster.stop(remove=False)
        stop_pids(pids)
        left = [p for p in pids if pid_alive(p)]
        if left:
            raise UserError(f"could not stop pids {left} of local cluster {state['cluster']}")
        shutil.rmtree(state["run_dir"], ignore_errors=True)
        path.unlink()
        stopped.append(f"{state['cluster']} ({len(pids)} processes)")
    stopped += sandbox.cleanup_stale(include_kept=True)  # the kept clusters' namespaces and cgroups, kind's too
    stopped += remove_leftovers()  # the kind engines' data (their sandboxes are gone now)
    if not stopped:
        return "nothing to stop: no kept local e2e cluster"
    return f"stopped and removed: {', '.join(stopped)}"
