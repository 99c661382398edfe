"""Runs the chart's controllers (Trainer, JobSet, LWS) as local processes against a local cluster.

What the chart installed stays the source: for each controller Deployment the binary is chosen by
its image (the lock names the image and the binary alike), the configuration is the chart's
ConfigMap, the identity is the chart's ServiceAccount (a TokenRequest token, so the chart's RBAC
is all the controller gets). Only what a pod would get from the kubelet is replaced: listen
addresses on 127.0.0.1, serving certificates from files (the controllers' own cert rotation is
switched off because it waits for a Secret volume no kubelet will mount), a leader-election
namespace (or, for a controller that reads it only from the pod's files, no leader election). The webhook Services become ExternalName Services pointing at 127.0.0.1 and the webhook
configurations get the local port and CA bundle, so the API server calls the local webhooks over
TLS. Each controller's pods are marked Ready only when its local process answers /readyz.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from .. import kubeapi, proc, tools, yamlio
from ..api import TRAINER_GROUP
from ..cluster.common import daemon_env
from ..cluster.local import LocalCluster, free_port, pid_alive, port_is_free, stop_pids
from ..errors import UserError
from ..jsontypes import dig

# Lock image name -> lock binary name: the upstream controllers the chart deploys.
CONTROLLER_IMAGES = ("trainer-controller-manager", "jobset-controller", "lws-controller")
# Binaries that take their leader-election namespace only from the pod's service-account file (LWS:
# utils.GetOperatorNamespace overrides the config's resourceNamespace, falling back to lws-system, where
# the chart grants no Lease access). A lone local process needs no lease, so their election is switched
# off rather than granting RBAC the chart does not.
NAMESPACE_FROM_POD_ONLY = frozenset({"lws-controller"})
# Starts of a controller that exits before it is ready, in all (HostControllers.wait_ready): the kubelet would
# go on restarting it; three starts ride out a slow start and still fail a controller that cannot start.
START_ATTEMPTS = 3


@dataclass
class HostController:
    """One controller Deployment of the chart, run as a local process."""

    deployment: str
    namespace: str
    binary_name: str
    service_account: str
    selector: dict[str, str]
    pod_labels: dict[str, str]
    config: dict[str, Any]
    extra_args: list[str]
    workdir: Path
    webhook_port: int = 0
    health_port: int = 0
    metrics_port: int = 0
    services: list[str] = field(default_factory=list)
    process: proc.Popen | None = None
    pid: int = 0

    @property
    def log(self) -> Path:
        return self.workdir / f"{self.deployment}.log"

    @property
    def cert_dir(self) -> Path:
        # controller-runtime's default ($TMPDIR/k8s-webhook-server/serving-certs); Trainer has no setting for it.
        return self.workdir / "tmp" / "k8s-webhook-server" / "serving-certs"

    def host_config(self) -> dict[str, Any]:
        """The chart's configuration with the in-pod settings replaced by local ones."""
        cfg = json.loads(json.dumps(self.config))
        group = str(cfg.get("apiVersion", "")).split("/")[0]
        webhook = cfg.setdefault("webhook", {})
        webhook.update({"port": self.webhook_port, "host": "127.0.0.1"})
        if group != f"config.{TRAINER_GROUP}":  # JobSet and LWS have certDir; Trainer uses $TMPDIR
            webhook["certDir"] = str(self.cert_dir)
        cfg.setdefault("health", {})["healthProbeBindAddress"] = f"127.0.0.1:{self.health_port}"
        # /metrics on 127.0.0.1 (HTTPS, the controllers' own self-signed serving): see metrics_url
        cfg.setdefault("metrics", {})["bindAddress"] = f"127.0.0.1:{self.metrics_port}" if self.metrics_port else "0"
        for key in ("certManagement", "internalCertManagement"):
            if key in cfg or (key == "certManagement") == (group == f"config.{TRAINER_GROUP}"):
                cfg.setdefault(key, {})["enable"] = False
        election = cfg.get("leaderElection")
        if isinstance(election, dict) and election.get("leaderElect"):
            if self.binary_name in NAMESPACE_FROM_POD_ONLY:
                election["leaderElect"] = False
            else:
                election["resourceNamespace"] = election.get("resourceNamespace") or self.namespace
        return cfg

    @property
    def metrics_url(self) -> str:
        """Where this controller serves /metrics (HTTPS; JobSet asks for a token allowed to GET /metrics)."""
        return f"https://127.0.0.1:{self.metrics_port}/metrics" if self.metrics_port else ""

    def command(self, binary: Path, config_path: Path, kubeconfig: Path) -> list[str]:
        return [str(binary), f"--config={config_path}", f"--kubeconfig={kubeconfig}", *self.extra_args]

    def readyz(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=2) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def tail(self, lines: int = 4) -> str:
        try:
            text = [ln for ln in self.log.read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return "no log"
        text = [ln for ln in text[1:] if not ln[:1].isspace() and not ln.startswith(("Usage", "  -"))]  # no usage text
        markers = (
            '"level":"error"',
            "ERROR",
            "error:",
            "Error:",
            "flag provided but not defined",
            "panic:",
            "invalid",
            "failed",
            "unable to",
        )
        errors = [ln for ln in text if any(m in ln for m in markers)]
        return " | ".join((errors or text)[-lines:])[:800] or "empty log"


def _config_from_configmap(
    cluster: LocalCluster, deploy: dict[str, Any], container: dict[str, Any]
) -> tuple[dict, list[str]]:
    """The chart's controller config (from the ConfigMap mounted at --config) and the other args."""
    args = list(container.get("args") or [])
    config_path = ""
    rest = []
    for i, arg in enumerate(args):
        if arg.startswith("--config="):
            config_path = arg.split("=", 1)[1]
        elif arg == "--config" and i + 1 < len(args):
            config_path = args[i + 1]
        elif i > 0 and args[i - 1] == "--config":
            continue
        else:
            rest.append(arg)
    if not config_path:
        return {}, rest
    volumes = {v["name"]: v for v in deploy["spec"]["template"]["spec"].get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        path = mount["mountPath"]
        if config_path == path or config_path.startswith(path.rstrip("/") + "/"):
            volume = volumes.get(mount["name"], {})
            if "configMap" not in volume:
                continue
            key = mount.get("subPath") or config_path[len(path.rstrip("/")) + 1 :]
            api = kubeapi.for_kube(cluster)
            cm = kubeapi.named(api, kubeapi.resource(api, "configmaps", deploy["metadata"]["namespace"]),
                               volume["configMap"]["name"]) or {}
            text = dig(cm, "data", key)
            if text is None:
                raise UserError(
                    f"ConfigMap {volume['configMap']['name']} has no key {key} "
                    f"(Deployment {deploy['metadata']['name']} reads --config={config_path})"
                )
            return yamlio.load(text) or {}, rest
    raise UserError(f"Deployment {deploy['metadata']['name']}: --config={config_path} is not a mounted ConfigMap")


def discover(cluster: LocalCluster, namespace: str, workdir: Path) -> list[HostController]:
    """The controller Deployments the chart installed in `namespace`, matched to pinned binaries by image."""
    images = {name: cluster.lock.image(name) for name in CONTROLLER_IMAGES}
    found = []
    api = kubeapi.for_kube(cluster)
    for deploy in kubeapi.items(api, kubeapi.resource(api, "deployments", namespace)):
        spec = deploy["spec"]["template"]["spec"]
        for container in spec.get("containers", []):
            repo = container.get("image", "").split("@")[0].rsplit(":", 1)[0]
            match = [name for name, img in images.items() if repo.endswith(img.repository)]
            if not match:
                continue
            config, rest = _config_from_configmap(cluster, deploy, container)
            found.append(
                HostController(
                    deployment=deploy["metadata"]["name"],
                    namespace=namespace,
                    binary_name=match[0],
                    service_account=spec.get("serviceAccountName") or "default",
                    selector=dict(deploy["spec"]["selector"].get("matchLabels") or {}),
                    pod_labels=dict(deploy["spec"]["template"]["metadata"].get("labels") or {}),
                    config=config,
                    extra_args=[a for a in rest if a.startswith("--zap")],
                    workdir=workdir,
                )
            )
    return found


class HostControllers:
    """Starts, watches and stops the chart's controllers as local processes."""

    def __init__(
        self,
        cluster: LocalCluster,
        namespace: str,
        workdir: Path,
        port_base: int | None = None,
        extra_args: dict[str, list[str]] | None = None,
    ) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.workdir = workdir
        self.port_base = port_base
        self.extra_args = extra_args or {}
        self.controllers: list[HostController] = []
        self._stop = threading.Event()
        self._kubelet: threading.Thread | None = None

    # -- setup ------------------------------------------------------------------------------
    def _ports(self, index: int) -> tuple[int, int, int]:
        """webhook, health and metrics ports: free ones, or from port_base (webhook and health pairs
        first, then one metrics port per controller)."""
        if self.port_base is None:
            return free_port(), free_port(), free_port()
        webhook, health = self.port_base + 2 * index, self.port_base + 2 * index + 1
        metrics = self.port_base + 2 * len(self.controllers) + index
        for port, what in ((webhook, "webhook"), (health, "health"), (metrics, "metrics")):
            if not port_is_free(port):
                raise UserError(
                    f"port 127.0.0.1:{port} ({self.controllers[index].deployment} {what}) is already in use",
                    "stop what listens there or pick another --port-base",
                )
        return webhook, health, metrics

    def prepare(self) -> None:
        """Find the controllers and give each its ports (before the webhooks are pointed at them)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.controllers = discover(self.cluster, self.namespace, self.workdir)
        if not self.controllers:
            raise UserError(
                f"no Trainer/JobSet/LWS controller Deployment found in namespace {self.namespace}",
                "check that the chart installed into this namespace",
            )
        for i, ctl in enumerate(self.controllers):
            ctl.webhook_port, ctl.health_port, ctl.metrics_port = self._ports(i)
            ctl.extra_args += self.extra_args.get(ctl.binary_name, [])

    def point_webhooks_here(self) -> list[str]:
        """ExternalName Services and webhook port + caBundle patches; returns what was changed."""
        changed = []
        api = kubeapi.for_kube(self.cluster)
        services = {s["metadata"]["name"]: s for s in kubeapi.items(api, kubeapi.resource(api, "services", self.namespace))}
        owner: dict[str, HostController] = {}
        for name, svc in services.items():
            selector = dig(svc, "spec", "selector") or {}
            for ctl in self.controllers:
                if selector and all(ctl.pod_labels.get(k) == v for k, v in selector.items()):
                    owner[name] = ctl
        bundle = self.cluster.ca_bundle()
        for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
            for config in kubeapi.items(api, kubeapi.resource(api, kind)):
                ops = []
                for i, hook in enumerate(config.get("webhooks") or []):
                    ref = dig(hook, "clientConfig", "service") or {}
                    if ref.get("namespace") != self.namespace or ref.get("name") not in owner:
                        continue
                    ctl = owner[ref["name"]]
                    if ref["name"] not in ctl.services:
                        ctl.services.append(ref["name"])
                    ops.append(
                        {"op": "add", "path": f"/webhooks/{i}/clientConfig/service/port", "value": ctl.webhook_port}
                    )
                    ops.append({"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": bundle})
                if ops:
                    self.cluster.kubectl(
                        "patch", kind, config["metadata"]["name"], "--type=json", "-p", json.dumps(ops)
                    )
                    changed.append(f"{kind[:-1]}/{config['metadata']['name']}")
        for ctl in self.controllers:
            for name in ctl.services:
                patch = {
                    "spec": {
                        "type": "ExternalName",
                        "externalName": "127.0.0.1",
                        "clusterIP": None,
                        "clusterIPs": None,
                        "selector": None,
                        "ipFamilies": None,
                        "ipFamilyPolicy": None,
                        "internalTrafficPolicy": None,
                        "sessionAffinity": None,
                    }
                }
                self.cluster.kubectl(
                    "patch", "service", name, "-n", self.namespace, "--type=merge", "-p", json.dumps(patch)
                )
                changed.append(f"service/{name}")
        return changed

    def _kubeconfig(self, ctl: HostController) -> Path:
        token = self.cluster.kubectl(
            "create", "token", ctl.service_account, "-n", self.namespace, "--duration=24h"
        ).stdout.strip()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "sa",
            "clusters": [
                {
                    "name": "local",
                    "cluster": {"server": self.cluster.server(), "certificate-authority": str(self.cluster.ca_cert)},
                }
            ],
            "users": [{"name": ctl.service_account, "user": {"token": token}}],
            "contexts": [
                {
                    "name": "sa",
                    "context": {"cluster": "local", "user": ctl.service_account, "namespace": self.namespace},
                }
            ],
        }
        path = self.workdir / f"{ctl.deployment}.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    # -- run --------------------------------------------------------------------------------
    def start(self) -> None:
        crt, key = self.cluster.serving_cert
        for ctl in self.controllers:
            binary = tools.require(ctl.binary_name, self.cluster.lock)
            ctl.cert_dir.mkdir(parents=True, exist_ok=True)
            (ctl.cert_dir / "tls.crt").write_bytes(crt.read_bytes())
            (ctl.cert_dir / "tls.key").write_bytes(key.read_bytes())
            (ctl.cert_dir / "tls.key").chmod(0o600)
            config_path = self.workdir / f"{ctl.deployment}.config.yaml"
            config_path.write_text(yaml.safe_dump(ctl.host_config(), sort_keys=False))
            cmd = ctl.command(binary, config_path, self._kubeconfig(ctl))
            env = {k: v for k, v in daemon_env().items() if not k.lower().endswith("_proxy")}
            env.update(
                {
                    "TMPDIR": str(ctl.cert_dir.parent.parent),
                    "NO_PROXY": "127.0.0.1,localhost",
                    "KUBECONFIG": cmd[2].split("=", 1)[1],
                }
            )
            with ctl.log.open("w") as sink:
                sink.write(f"$ {shlex.join(cmd)}\n")
                sink.flush()
                ctl.process = proc.start(
                    cmd,
                    what=ctl.deployment,
                    stdout=sink,
                    stderr=proc.STDOUT,
                    stdin=proc.DEVNULL,
                    env=env,
                    cwd=self.workdir,
                    start_new_session=True,
                )
            ctl.pid = ctl.process.pid

    def wait_ready(self, timeout: float = 90, on_wait=None, starts: int = START_ATTEMPTS) -> None:
        """Until every controller answers /readyz. A controller that exits first is started again (its log
        kept), as the kubelet restarts a Deployment's pod, up to STARTS starts in all: a controller can exit
        at start on a loaded machine (its leader election or cache sync timing out). One that exits
        STARTS times, or stays unready, fails with its log."""
        deadline = time.monotonic() + timeout
        pending = list(self.controllers)
        started = dict.fromkeys((c.deployment for c in pending), 1)
        while pending:
            for ctl in list(pending):
                if ctl.process is not None and ctl.process.poll() is not None:
                    if started[ctl.deployment] >= starts:
                        raise UserError(
                            f"controller {ctl.deployment} ({ctl.binary_name}) exited with code "
                            f"{ctl.process.returncode} before it was ready ({starts} starts): {ctl.tail()}",
                            f"full log: {ctl.log}",
                        )
                    started[ctl.deployment] += 1
                    self._start_again([ctl])
                elif ctl.readyz():
                    pending.remove(ctl)
            if not pending:
                break
            if time.monotonic() > deadline:
                ctl = pending[0]
                raise UserError(
                    f"controller {ctl.deployment} ({ctl.binary_name}) not ready within {timeout:.0f}s "
                    f"(127.0.0.1:{ctl.health_port}/readyz): {ctl.tail()}",
                    f"full log: {ctl.log}",
                )
            if on_wait:
                on_wait([c.deployment for c in pending])
            time.sleep(0.2)

    def start_kubelet(self) -> None:
        """Background loop: mark each controller's pods Running/Ready while its process is ready."""
        self._kubelet = threading.Thread(target=self._kubelet_loop, name="host-kubelet", daemon=True)
        self._kubelet.start()

    def _kubelet_loop(self) -> None:
        while not self._stop.is_set():
            # the API may be going away during teardown; try again
            with contextlib.suppress(Exception):
                self.mark_pods_ready()
            self._stop.wait(1.0)

    def mark_pods_ready(self) -> int:
        marked = 0
        api = kubeapi.for_kube(self.cluster)
        pods = kubeapi.items(api, kubeapi.resource(api, "pods", self.namespace))
        for ctl in self.controllers:
            if ctl.process is None or ctl.process.poll() is not None or not ctl.readyz():
                continue
            for pod in pods:
                labels = pod["metadata"].get("labels") or {}
                if not all(labels.get(k) == v for k, v in ctl.selector.items()):
                    continue
                if pod["metadata"].get("deletionTimestamp") or not pod["spec"].get("nodeName"):
                    continue
                conds = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}
                if conds.get("Ready") == "True":
                    continue
                now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                status = {
                    "phase": "Running",
                    "startTime": now,
                    "podIP": "127.0.0.1",
                    "hostIP": "127.0.0.1",
                    "conditions": [
                        {"type": t, "status": "True", "lastTransitionTime": now}
                        for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
                    ],
                    "containerStatuses": [
                        {
                            "name": c["name"],
                            "image": c["image"],
                            "imageID": "",
                            "ready": True,
                            "started": True,
                            "restartCount": 0,
                            "state": {"running": {"startedAt": now}},
                        }
                        for c in pod["spec"]["containers"]
                    ],
                }
                self.cluster.kubectl(
                    "patch",
                    "pod",
                    pod["metadata"]["name"],
                    "-n",
                    self.namespace,
                    "--subresource=status",
                    "--type=merge",
                    "-p",
                    json.dumps({"status": status}),
                )
                marked += 1
        return marked

    def pids(self) -> dict[str, int]:
        return {ctl.deployment: ctl.pid for ctl in self.controllers if ctl.pid}

    @property
    def metrics_urls(self) -> dict[str, str]:
        """Deployment -> its controller's /metrics URL on 127.0.0.1 (for monitoring.scrape)."""
        return {ctl.deployment: ctl.metrics_url for ctl in self.controllers if ctl.metrics_url}

    def logs(self) -> dict[str, Path]:
        return {ctl.deployment: ctl.log for ctl in self.controllers if ctl.log.exists()}

    def stop(self) -> None:
        self._stop.set()
        if self._kubelet is not None:
            self._kubelet.join(timeout=5)
        stop_pids([ctl.pid for ctl in self.controllers if ctl.pid])
        for ctl in self.controllers:
            if ctl.process is not None:
                try:
                    ctl.process.wait(timeout=5)
                except proc.TimeoutExpired:
                    pass

    def _start_again(self, dead: list[HostController]) -> None:
        """Start DEAD's controllers again with their config and ports, the log of the run that died kept."""
        for ctl in dead:
            if ctl.log.exists():
                ctl.log.rename(ctl.log.with_suffix(f".{time.time_ns()}.log"))
        every = self.controllers
        try:  # start() starts its list: only the dead ones, same config and ports
            self.controllers = dead
            self.start()
        finally:
            self.controllers = every

    def alive(self) -> list[str]:
        return [ctl.deployment for ctl in self.controllers if ctl.pid and pid_alive(ctl.pid)]

    def restart_dead(self, timeout: float = 120) -> list[str]:
        """Start again each controller whose process is gone, with its config and ports (what the kubelet does
        for a Deployment's pod: restartPolicy Always; a controller exits when it loses its leader lease while
        the API server is away), and wait until they are ready. The Deployments started again."""
        dead = [c for c in self.controllers if not (c.pid and pid_alive(c.pid))]
        if not dead:
            return []
        self._start_again(dead)
        self.wait_ready(timeout=timeout)
        return [c.deployment for c in dead]
