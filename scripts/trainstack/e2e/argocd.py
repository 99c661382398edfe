"""Argo CD for `e2e --gitops`: its pinned manifests (CRDs, install.yaml) and its components as
processes inside the cluster's sandbox.

One binary from `trainstack tools install argocd`, symlinked as each component, as upstream's image
does: argocd-application-controller, argocd-repo-server and argocd-applicationset-controller, with a
Redis from the pinned Debian package. They reach the API server with an admin kubeconfig. The
repo-server is Argo CD's own, as installed: no plugin, no sidecar, nothing of trainstack on its PATH
(the pinned helm and kustomize, as upstream's image bundles them, and git).
"""

from __future__ import annotations

import gzip
import json
import shutil
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .. import deps, helm, proc, tools, yamlio
from .. import lock as lockmod
from ..cluster import sandbox as sandboxmod
from ..errors import UserError
from .base import SuiteFailure
from .suite import Suite

ARGOCD_NS = "argocd"
REDIS_PORT = 6379
REPO_SERVER_PORT = 8081
COMPONENTS = ("argocd-repo-server", "argocd-application-controller", "argocd-applicationset-controller")
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
        """PATH: the pinned helm and kustomize (upstream's image bundles its own), git; no Python of ours."""
        base = helm.env(self.suite.lock)
        env = {k: v for k, v in base.items() if k.startswith(("HELM_", "LANG", "LC_"))}
        env.update({
            "PATH": f"{bin_dir}:{base['PATH']}",
            "TMPDIR": str(self.dir / "tmp"),
            "KUBECONFIG": str(self.suite.kube.kubeconfig),
            "ARGOCD_EXEC_TIMEOUT": "300s",
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
        for sub in ("tmp", "config/gpg/keys", "config/gpg/source", "config/ssh", "config/tls"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        return env

    def start(self) -> str:
        bin_dir = self.links()
        env = self.env(bin_dir)
        kube = ["--kubeconfig", str(self.suite.kube.kubeconfig), "--namespace", ARGOCD_NS]
        redis = f"127.0.0.1:{REDIS_PORT}"
        repo = f"127.0.0.1:{REPO_SERVER_PORT}"
        (self.dir / "redis").mkdir(exist_ok=True)
        commands = {
            "redis": ["redis-server", "--bind", "127.0.0.1", "--port", str(REDIS_PORT), "--save", "",
                      "--appendonly", "no", "--dir", str(self.dir / "redis")],
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

    def log_entries(self, name: str) -> Iterator[dict[str, Any]]:
        """A component's log entries (Argo CD logs one JSON object a line)."""
        log = self.logs_dir / f"{name}.log"
        for line in log.read_text(errors="replace").splitlines() if log.is_file() else []:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict):
                yield entry

    def renders(self, app: str) -> int:
        """How many times the repo-server has rendered APP's manifests: its "manifest cache miss" entries
        (a GenerateManifest answered from its cache logs "manifest cache hit" instead)."""
        return sum(1 for e in self.log_entries("argocd-repo-server")
                   if e.get("msg") == "manifest cache miss" and e.get("application") == app)

    def cached_manifests(self, app: str, revision: str) -> list[dict[str, Any]]:
        """The manifests the repo-server generated for APP at REVISION, as Argo CD applies them: read from its
        Redis cache (key `mfst|...|APP|REVISION|...`, gzip-compressed JSON of the ManifestResponse)."""
        cli = [*self.sandbox.enter_net(), shutil.which("redis-cli") or "redis-cli", "-h", "127.0.0.1",
               "-p", str(REDIS_PORT)]
        keys = proc.run([*cli, "--scan", "--pattern", f"mfst|*|{app}|{revision}|*"], check=False, timeout=30)
        found = sorted(k for k in keys.stdout.splitlines() if k.strip())
        if not found:
            raise SuiteFailure(f"no manifests of {app} at {revision[:12]} in the repo-server's cache",
                               keys.stderr.strip()[-200:])
        raw = proc.run([*cli, "--raw", "GET", found[-1]], text=False, timeout=30).stdout
        text = gzip.decompress(raw[:-1] if raw.endswith(b"\n") else raw).decode()
        response = (json.loads(text).get("manifestResponse") or {})
        return [json.loads(m) for m in response.get("manifests") or []]

    def logs(self) -> dict[str, Path]:
        return {p.stem: p for p in self.logs_dir.glob("*.log")} if self.logs_dir.is_dir() else {}

    def stop(self) -> None:
        sandboxmod.stop_all(list(self.procs.values()))


def redis_version() -> str:
    out = proc.run([shutil.which("redis-server") or "redis-server", "--version"], check=False).stdout
    return out.split(" v=")[1].split()[0] if " v=" in out else out.strip()

