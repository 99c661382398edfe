"""Argo CD for `e2e --gitops`: its pinned manifests (CRDs, install.yaml) and its components as
processes inside the cluster's sandbox.

One binary from `trainstack tools install argocd`, symlinked as each component, as upstream's image
does: argocd-application-controller, argocd-repo-server, argocd-applicationset-controller and
argocd-cmp-server (the trainstack plugin), with a Redis from the pinned Debian package. They reach the
API server with an admin kubeconfig.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .. import deps, helm, paths, proc, rendercache, tools, yamlio
from .. import lock as lockmod
from ..cluster import sandbox as sandboxmod
from ..errors import UserError
from .base import SuiteFailure
from .suite import Suite

ARGOCD_NS = "argocd"
REDIS_PORT = 6379
REPO_SERVER_PORT = 8081
COMPONENTS = ("argocd-repo-server", "argocd-cmp-server", "argocd-application-controller",
              "argocd-applicationset-controller")
# How often the application controller compares git with the cluster (argocd-cm timeout.reconciliation;
# Argo CD's default is 120s plus up to 60s of jitter): short and without jitter, so "two more
# reconciles" take seconds.
RECONCILE_S = 5


def argocd_manifests(lock: lockmod.Lock) -> tuple[list[dict[str, Any]], str]:
    """(Argo CD's CRDs, its manifests/install.yaml text) from the pinned, checksum-verified module."""
    source = lock.source("argocd")
    zip_path = deps._verified_zip(source)
    prefix = f"{source.module}@{source.version}/manifests/"
    crds: list[dict[str, Any]] = []
    with zipfile.ZipFile(zip_path) as archive:
        for name in sorted(archive.namelist()):
            if name.startswith(prefix + "crds/") and name.endswith("-crd.yaml"):
                crds += [d for d in yamlio.load_all(archive.read(name).decode()) if isinstance(d, dict)]
        install = archive.read(prefix + "install.yaml").decode()
    if not crds:
        raise UserError(f"{source.module}@{source.version} has no CRDs under manifests/crds")
    return crds, install


class ArgoCD:
    """The Argo CD components as processes inside the cluster's sandbox (see the module docstring)."""

    def __init__(self, suite: Suite, workdir: Path) -> None:
        self.suite = suite
        self.dir = workdir
        self.procs: dict[str, proc.Popen] = {}

    @property
    def sandbox(self):
        return self.suite.kube.sandbox

    @property
    def logs_dir(self) -> Path:
        return self.dir / "logs"

    def links(self) -> Path:
        """The pinned binary under each component's name (it dispatches on argv[0], like upstream's image)."""
        binary = tools.require("argocd", self.suite.lock)
        bin_dir = self.dir / "bin"
        bin_dir.mkdir(parents=True, exist_ok=True)
        for name in (*COMPONENTS, "argocd"):
            link = bin_dir / name
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(binary)
        # the scripts upstream's image puts beside it (Dockerfile: COPY hack/git-verify-wrapper.sh ...): the
        # repo-server runs git-verify-wrapper.sh on every revision it renders
        source = self.suite.lock.source("argocd")
        with zipfile.ZipFile(deps._verified_zip(source)) as archive:
            for script in ("git-verify-wrapper.sh", "gpg-wrapper.sh"):
                target = bin_dir / script
                target.write_bytes(archive.read(f"{source.module}@{source.version}/hack/{script}"))
                target.chmod(0o755)
        return bin_dir

    def env(self, bin_dir: Path) -> dict[str, str]:
        """PATH: the pinned helm and kustomize, git, the venv's python3 (the plugin runs trainstack)."""
        base = helm.env(self.suite.lock)
        venv = Path(sys.executable).parent
        env = {k: v for k, v in base.items() if k.startswith(("HELM_", "TRAINSTACK_", "LANG", "LC_"))}
        env.update({
            "PATH": f"{bin_dir}:{venv}:{base['PATH']}",
            "TMPDIR": str(self.dir / "tmp"),
            "KUBECONFIG": str(self.suite.kube.kubeconfig),
            "TRAINSTACK_CACHE": str(paths.cache_dir()),
            # the namespace has no route out: `trainstack deps` builds from the pinned sources in the Go
            # module cache, as docs/gitops.md tells air-gapped sidecars to
            "TRAINSTACK_DEPS_SOURCE": "source", "GOPROXY": "off", "GOFLAGS": "-mod=mod",
            **go_env(),
            "ARGOCD_EXEC_TIMEOUT": "300s",
            "ARGOCD_PLUGINSOCKFILEPATH": str(self.dir / "plugins"),
            # what upstream's image mounts under /app/config: here in the run's folder
            "ARGOCD_GPG_ENABLED": "false",
            "ARGOCD_GNUPGHOME": str(self.dir / "config" / "gpg" / "keys"),
            "ARGOCD_SSH_DATA_PATH": str(self.dir / "config" / "ssh"),
            "ARGOCD_TLS_DATA_PATH": str(self.dir / "config" / "tls"),
            "ARGOCD_GPG_DATA_PATH": str(self.dir / "config" / "gpg" / "source"),
            # The chart registry's certificate is from the cluster's CA (helm, under kustomize, trusts it).
            "SSL_CERT_FILE": str(self.suite.kube.ca_cert),
            # install.yaml's controller StatefulSet sets this from argocd-cm `timeout.reconciliation`
            "ARGOCD_RECONCILIATION_TIMEOUT": f"{RECONCILE_S}s",
            # and `timeout.reconciliation.jitter`: up to 60s added to every resync by default in v3.6
            "ARGOCD_RECONCILIATION_JITTER": "0s",
            # Argo CD sleeps 2s between sync waves (controller/sync.go delayBetweenSyncWaves) so that
            # hooks do not fire on a stale health; trainstack syncs no hooks, and every wave still waits
            # for the health of the one before (a Deployment's counts only once its controller observed
            # it). Six waves a sync, four syncs here: 0s, as Argo CD's docs allow.
            "ARGOCD_SYNC_WAVE_DELAY": "0",
        })
        for sub in ("tmp", "plugins", "cmp-config", "config/gpg/keys", "config/gpg/source", "config/ssh", "config/tls"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        return env

    def start(self, plugin_config: str) -> str:
        bin_dir = self.links()
        env = self.env(bin_dir)
        (self.dir / "cmp-config" / "plugin.yaml").write_text(plugin_config)
        kube = ["--kubeconfig", str(self.suite.kube.kubeconfig), "--namespace", ARGOCD_NS]
        redis = f"127.0.0.1:{REDIS_PORT}"
        repo = f"127.0.0.1:{REPO_SERVER_PORT}"
        (self.dir / "redis").mkdir(exist_ok=True)
        commands = {
            "redis": ["redis-server", "--bind", "127.0.0.1", "--port", str(REDIS_PORT), "--save", "",
                      "--appendonly", "no", "--dir", str(self.dir / "redis")],
            "argocd-cmp-server": [str(bin_dir / "argocd-cmp-server"), "--config-dir-path", str(self.dir / "cmp-config"),
                                  "--loglevel", "info"],
            "argocd-repo-server": [str(bin_dir / "argocd-repo-server"), "--redis", redis, "--disable-tls",
                                   "--client-ca-path", "",
                                   "--address", "127.0.0.1", "--port", str(REPO_SERVER_PORT),
                                   "--metrics-address", "127.0.0.1", "--loglevel", "info"],
            "argocd-application-controller": [
                str(bin_dir / "argocd-application-controller"), *kube, "--redis", redis, "--repo-server", repo,
                "--repo-server-plaintext", "--repo-server-timeout-seconds", "300", "--metrics-port", "8082",
                "--loglevel", "info",
                "--status-processors", "4", "--operation-processors", "2",
                # Argo CD 3 keeps resource health out of the Application (in the resource tree) unless asked
                "--persist-resource-health"],
            "argocd-applicationset-controller": [
                str(bin_dir / "argocd-applicationset-controller"), *kube, "--argocd-repo-server", repo,
                "--repo-server-plaintext", "--repo-server-timeout-seconds", "300",
                "--metrics-addr", "127.0.0.1:18080", "--probe-addr", "127.0.0.1:18081",
                "--enable-leader-election=false", "--loglevel", "info"],
        }
        for name, cmd in commands.items():
            if name == "redis":
                cmd[0] = shutil.which("redis-server") or cmd[0]
            self.procs[name] = self.sandbox.start(name, cmd, self.logs_dir / f"{name}.log", env=env)
            if name in ("redis", "argocd-repo-server"):
                self._wait_tcp(REDIS_PORT if name == "redis" else REPO_SERVER_PORT, name)
        time.sleep(1)
        dead = [n for n, p in self.procs.items() if p.poll() is not None]
        if dead:
            raise SuiteFailure(f"Argo CD component(s) exited: {', '.join(dead)}: {self.log_tail(dead[0])}",
                               f"logs: {self.logs_dir}")
        # the CLI wants a HOME for its config (the components run without one)
        out = proc.run([str(bin_dir / "argocd"), "version", "--client", "--short"], check=False,
                       env={**env, "HOME": str(self.dir)})
        version = (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr).strip() else "argocd"
        return (f"{version}; " + ", ".join(f"{n} (pid {p.pid})" for n, p in self.procs.items())
                + f"; Redis {redis_version()}; all in the cluster's network namespace")

    def _wait_tcp(self, port: int, what: str, timeout: float = 30) -> None:
        if not self.sandbox.wait_listening(port, timeout, alive=lambda: self.procs[what].poll() is None):
            raise SuiteFailure(f"{what} did not listen on 127.0.0.1:{port}: {self.log_tail(what)}",
                               f"log: {self.logs_dir / (what + '.log')}")

    def log_tail(self, name: str, lines: int = 3) -> str:
        return sandboxmod.log_tail(self.logs_dir / f"{name}.log", lines, width=600)

    def cmp_log(self) -> Iterator[dict[str, Any]]:
        """The CMP server's log entries (one JSON object a line)."""
        log = self.logs_dir / "argocd-cmp-server.log"
        for line in log.read_text(errors="replace").splitlines() if log.is_file() else []:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict):
                yield entry

    def plugin_renders(self) -> int:
        """How many times the trainstack plugin has generated manifests: the CMP server's finished
        GenerateManifest calls (its gRPC log)."""
        return sum(1 for e in self.cmp_log() if e.get("grpc.method") == "GenerateManifest" and "grpc.code" in e)

    def plugin_generates(self) -> list[bool]:
        """Each run of the plugin's `generate` (trainstack render) so far, in order: whether it printed
        a stored render (the CMP server logs each plugin command with its stderr)."""
        return [rendercache.REUSED in str(e.get("stderr", "")) for e in self.cmp_log()
                if isinstance(e.get("command"), dict) and "-m trainstack render" in " ".join(e["command"].get("args") or [])]

    def logs(self) -> dict[str, Path]:
        return {p.stem: p for p in self.logs_dir.glob("*.log")} if self.logs_dir.is_dir() else {}

    def stop(self) -> None:
        sandboxmod.stop_all(list(self.procs.values()))


def go_env() -> dict[str, str]:
    """The machine's Go module and build caches, named explicitly (the plugin's commands get no HOME)."""
    out = proc.run(["go", "env", "-json", "GOMODCACHE", "GOCACHE", "GOPATH"], check=False)
    return json.loads(out.stdout) if out.returncode == 0 else {}


def redis_version() -> str:
    out = proc.run([shutil.which("redis-server") or "redis-server", "--version"], check=False).stdout
    return out.split(" v=")[1].split()[0] if " v=" in out else out.strip()

