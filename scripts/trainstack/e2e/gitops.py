"""`trainstack e2e --gitops`: the platform synced from git by the real Argo CD, on the local cluster.

What runs, all inside the cluster's network (and mount) namespace, on its loopback:
- a git daemon serving a bare repository made from this checkout (tracked and untracked-not-ignored
  files, as committed plus uncommitted), with one commit on top the way an air-gapped user writes
  theirs: the environment's values point at the cluster's image mirror, the AppProject names this
  repository;
- the chart published with `trainstack chart publish` to a second pinned distribution registry
  (TLS, a certificate from the cluster's CA), for the published-chart path;
- Argo CD at the pinned version (one binary from `trainstack tools install argocd`, symlinked as each
  component, as upstream's image does): argocd-application-controller, argocd-repo-server,
  argocd-applicationset-controller and argocd-cmp-server (the trainstack plugin) as processes, with a
  Redis from the pinned Debian package. They reach the API server with an admin kubeconfig.

Installed the way users install it: Argo CD's CRDs and its install.yaml's configuration (ConfigMaps,
Secrets) from the pinned module, through kustomize with overlays/argocd/install as a Component (its
Deployments are not applied: their processes run here), server-side; then the cluster Secret
labelled with the environment, the repository Secret, and `kustomize build overlays/argocd`
(AppProject, ApplicationSet, plugin ConfigMap).

The TrainJobs from git run the golden CPU torch runtime with the `python` image (Debian and
python3, tens of megabytes) as their trainer image: what they show is Argo CD's health of a real
TrainJob, and the torch image's gigabytes (which `make e2e` trains with) would only make the node
unpack them beside Argo CD's first sync.

The checks (each a step): the ApplicationSet generates the Application for this cluster; it syncs to
Synced and Healthy through the plugin; the order of the operation's resource results follows the
sync waves; the Trainer CRDs are applied server-side; the suite's CRD, controller, runtime and
policy checks; no drift over two more reconciles; a TrainJob from git is Progressing then Healthy,
a failing one Degraded (the health Lua, live), and that commit (outside the platform's
manifest-generate-paths) does not run the plugin again; a commit changing a value reaches the
cluster (and is rendered by the plugin); the
published chart (Kustomize helmCharts from the OCI registry, git holding only values) takes over the
objects and syncs; deleting that Application removes the release but keeps the CRDs and TrainJobs.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from .. import deps, helm, images, kubeapi, paths, tools, yamlio
from .. import lock as lockmod
from ..cluster import sandbox as sandboxmod
from ..errors import UserError, output_line
from . import suite as suitemod
from .suite import NAMESPACE, SMOKE_NS, SmokeJob, Suite, SuiteFailure

ARGOCD_NS = "argocd"
GIT_PORT = 9418
REDIS_PORT = 6379
REPO_SERVER_PORT = 8081
CHART_REGISTRY_PORT = 5443
GIT_URL = f"git://127.0.0.1:{GIT_PORT}/trainstack.git"
CHART_REPO = f"oci://127.0.0.1:{CHART_REGISTRY_PORT}/charts"
BRANCH = "main"
JOBS_APP = "trainstack-e2e-jobs"
JOBS_PATH = "e2e/gitops/jobs"
PUBLISHED_APP = "trainstack-published"
PUBLISHED_PATH = "e2e/gitops/published"
COMPONENTS = ("argocd-repo-server", "argocd-cmp-server", "argocd-application-controller",
              "argocd-applicationset-controller")
TRAINER_CRDS = ("trainjobs.trainer.kubeflow.org", "trainingruntimes.trainer.kubeflow.org",
                "clustertrainingruntimes.trainer.kubeflow.org")
# How often the application controller compares git with the cluster (argocd-cm timeout.reconciliation;
# Argo CD's default is 120s plus up to 60s of jitter): short and without jitter, so "two more
# reconciles" take seconds.
RECONCILE_S = 5
REPLICAS_VALUE = ("kubeflow-trainer", "manager", "replicas")


def _git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "trainstack e2e", "GIT_AUTHOR_EMAIL": "e2e@trainstack.invalid",
           "GIT_COMMITTER_NAME": "trainstack e2e", "GIT_COMMITTER_EMAIL": "e2e@trainstack.invalid",
           "PATH": "/usr/bin:/bin", "HOME": str(repo)}
    result = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env)
    if result.returncode != 0:
        raise UserError(f"git {' '.join(args[:2])} failed in {repo}: {(result.stderr or result.stdout).strip()[-300:]}")
    return result.stdout


class GitRepo:
    """A bare repository of the checkout's current tree (never the checkout's own .git) and a work clone."""

    def __init__(self, workdir: Path) -> None:
        self.bare = workdir / "git" / "trainstack.git"
        self.work = workdir / "git-work"

    def snapshot(self, root: Path) -> str:
        """Copy what git tracks plus untracked files it does not ignore, commit it on `main`."""
        listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                                capture_output=True, text=True)
        if listed.returncode != 0:
            raise UserError(f"{root} is not a git checkout: {listed.stderr.strip()}",
                            "e2e --gitops serves this checkout's tree from a git repository")
        shutil.rmtree(self.work, ignore_errors=True)
        self.work.mkdir(parents=True)
        for rel in sorted({p for p in listed.stdout.split("\0") if p}):
            src = root / rel
            if not src.exists() and not src.is_symlink():
                continue  # deleted, not yet committed
            dest = self.work / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            if src.is_symlink():
                dest.symlink_to(src.readlink())
            elif src.is_file():
                shutil.copy2(src, dest)
        _git(self.work, "init", "-q", "-b", BRANCH)
        _git(self.work, "add", "-A")
        _git(self.work, "commit", "-q", "-m", "trainstack: the checkout's tree")
        shutil.rmtree(self.bare, ignore_errors=True)
        self.bare.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "clone", "-q", "--bare", str(self.work), str(self.bare)], check=True,
                       capture_output=True)
        _git(self.work, "remote", "add", "origin", str(self.bare))
        return self.head()

    def commit(self, message: str, edit: Callable[[Path], None]) -> str:
        edit(self.work)
        _git(self.work, "add", "-A")
        _git(self.work, "commit", "-q", "-m", message)
        _git(self.work, "push", "-q", "origin", BRANCH)
        return self.head()

    def head(self) -> str:
        return _git(self.work, "rev-parse", "HEAD").strip()


def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def argocd_manifests(lock: lockmod.Lock) -> tuple[list[dict[str, Any]], str]:
    """(Argo CD's CRDs, its manifests/install.yaml text) from the pinned, checksum-verified module."""
    source = lock.source("argocd")
    zip_path = deps._verified_zip(source)
    prefix = f"{source.module}@{source.version}/manifests/"
    crds: list[dict[str, Any]] = []
    with zipfile.ZipFile(zip_path) as archive:
        for name in sorted(archive.namelist()):
            if name.startswith(prefix + "crds/") and name.endswith("-crd.yaml"):
                crds += [d for d in yamlio.load_all(archive.read(name)) if isinstance(d, dict)]
        install = archive.read(prefix + "install.yaml").decode()
    if not crds:
        raise UserError(f"{source.module}@{source.version} has no CRDs under manifests/crds")
    return crds, install


class ArgoCD:
    """The Argo CD components as processes inside the cluster's sandbox (see the module docstring)."""

    def __init__(self, suite: Suite, workdir: Path) -> None:
        self.suite = suite
        self.dir = workdir
        self.procs: dict[str, subprocess.Popen] = {}

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
        out = subprocess.run([str(bin_dir / "argocd"), "version", "--client", "--short"], capture_output=True,
                             text=True, env={**env, "HOME": str(self.dir)})
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
        from .. import rendercache

        return [rendercache.REUSED in str(e.get("stderr", "")) for e in self.cmp_log()
                if isinstance(e.get("command"), dict) and "-m trainstack render" in " ".join(e["command"].get("args") or [])]

    def logs(self) -> dict[str, Path]:
        return {p.stem: p for p in self.logs_dir.glob("*.log")} if self.logs_dir.is_dir() else {}

    def stop(self) -> None:
        sandboxmod.stop_all(list(self.procs.values()))


def go_env() -> dict[str, str]:
    """The machine's Go module and build caches, named explicitly (the plugin's commands get no HOME)."""
    out = subprocess.run(["go", "env", "-json", "GOMODCACHE", "GOCACHE", "GOPATH"], capture_output=True, text=True)
    return json.loads(out.stdout) if out.returncode == 0 else {}


def redis_version() -> str:
    out = subprocess.run([shutil.which("redis-server") or "redis-server", "--version"], capture_output=True,
                         text=True).stdout
    return out.split(" v=")[1].split()[0] if " v=" in out else out.strip()


def wave(obj: dict[str, Any]) -> int:
    return int(((obj.get("metadata") or {}).get("annotations") or {}).get("argocd.argoproj.io/sync-wave", "0"))


class GitOpsSuite:
    """The gitops steps; the platform checks that apply are the Suite's own methods."""

    def __init__(self, provider: Any, env: str, run_dir: Path, lock: lockmod.Lock | None = None,
                 keep: bool = False, log: Callable[[str], None] | None = None) -> None:
        self.suite = Suite(provider, env, run_dir, lock=lock, keep=keep, log=log)
        self.suite.workload_images = ("python",)
        self.env = env
        self.run_dir = run_dir
        self.lock = self.suite.lock
        self.log = self.suite.log
        self.git = GitRepo(run_dir)
        self.argocd = ArgoCD(self.suite, run_dir / "argocd")
        self.procs: dict[str, subprocess.Popen] = {}
        self.app = ""  # the generated Application's name
        self.chart_version = ""
        self.trainjobs: list[str] = []
        self.replicas: tuple[int, int] = (0, 0)
        self.revision = ""
        # plugin renders caused by a commit outside / inside the platform's manifest-generate-paths
        self.renders: dict[str, int] = {}
        # each plugin generate during the first sync: whether it reused the stored render
        self.first_sync_generates: list[bool] = []

    @property
    def steps(self):
        return self.suite.steps

    @property
    def kube(self):
        return self.suite.kube

    # -- plan ---------------------------------------------------------------------------------
    def plan(self) -> list[tuple[str, Callable[[], str | None]]]:
        s = self.suite
        return [
            *s.cluster_steps(", real node"),
            ("git repository served in the cluster's namespace", self.serve_git),
            ("chart published to the cluster's OCI registry", self.publish_chart),
            ("Argo CD CRDs and install component (server-side)", self.install_argocd),
            ("Argo CD components running", self.start_argocd),
            ("cluster Secret, repository, AppProject, ApplicationSet", self.register),
            ("Application Synced and Healthy (plugin)", self.synced_healthy),
            ("sync waves in order (operation result)", self.sync_waves),
            ("Trainer CRDs applied server-side", self.crds_server_side),
            *s.platform_checks(),
            ("no drift after two more reconciles", self.no_drift),
            ("TrainJob health from git: Progressing, Healthy, Degraded", self.trainjob_health),
            ("a git commit reaches the cluster", self.commit_reaches_cluster),
            ("published OCI chart with values from git", self.published_chart),
            ("deleting the Application keeps CRDs and TrainJobs", self.delete_application),
        ]

    def step(self, name: str, fn: Callable[[], str | None]) -> None:
        self.suite.step(name, fn)

    def run(self) -> None:
        self.suite.run(self.plan(), hint=f"Argo CD logs: {self.argocd.logs_dir}")

    def logs(self) -> dict[str, Path]:
        out = self.argocd.logs()
        for name in ("git-daemon", "chart-registry"):
            path = self.run_dir / "logs" / f"{name}.log"
            if path.is_file():
                out[name] = path
        return out

    def stop(self) -> None:
        sandboxmod.stop_all([*self.argocd.procs.values(), *self.procs.values()])

    # -- helpers ------------------------------------------------------------------------------
    def _start(self, name: str, cmd: list[str], port: int) -> None:
        log = self.run_dir / "logs" / f"{name}.log"
        self.procs[name] = self.kube.sandbox.start(name, cmd, log)
        if not self.kube.sandbox.wait_listening(port, 20, alive=lambda: self.procs[name].poll() is None):
            raise SuiteFailure(f"{name} did not listen on 127.0.0.1:{port}: {sandboxmod.log_tail(log, 3, width=300)}")

    def apply(self, objects: list[dict[str, Any]]) -> None:
        """Server-side apply, as Argo CD's install guide and its users do for its big CRDs."""
        text = yaml.safe_dump_all(objects, sort_keys=False)
        self.kube.kubectl("apply", "--server-side", "--field-manager=trainstack-e2e", "--force-conflicts", "-f", "-",
                          input_text=text, timeout=120)

    # The cluster is read and waited on with the kubernetes client (kubeapi: watches, not polling).
    def api(self) -> Any:
        return self.suite.api()

    def listing(self, plural: str, namespace: str | None = None) -> Callable[..., Any]:
        return kubeapi.resource(self.api(), plural, namespace)

    def applications(self) -> Callable[..., Any]:
        return self.listing("applications", ARGOCD_NS)

    def crds(self) -> Callable[..., Any]:
        return self.listing("customresourcedefinitions")

    def deployments(self) -> list[dict[str, Any]]:
        return self.suite.read("deployments", NAMESPACE)

    def trainjob_names(self) -> set[str]:
        return {t["metadata"]["name"] for t in self.suite.read("trainjobs", SMOKE_NS)}

    def wait_established(self, names: list[str], timeout: float = 60) -> None:
        def ready(crds: dict[str, dict[str, Any]]) -> set[str]:
            return {n for n, c in crds.items() if any(k.get("type") == "Established" and k.get("status") == "True"
                                                      for k in (c.get("status") or {}).get("conditions") or [])}

        if not kubeapi.wait_for(self.api(), self.crds(), lambda crds: set(names) <= ready(crds), timeout):
            missing = set(names) - ready({c["metadata"]["name"]: c for c in kubeapi.items(self.api(), self.crds())})
            raise SuiteFailure(f"CRDs not Established within {timeout:.0f}s: {', '.join(sorted(missing))}")

    def application(self, name: str | None = None) -> dict[str, Any]:
        return kubeapi.named(self.api(), self.applications(), name or self.app) or {}

    def check_argocd(self) -> None:
        dead = [n for n, p in self.argocd.procs.items() if p.poll() is not None]
        if dead:
            raise SuiteFailure(f"Argo CD component {dead[0]} exited: {self.argocd.log_tail(dead[0])}")

    def watch_app(self, name: str, timeout: float) -> Iterator[dict[str, Any]]:
        """NAME as it is now and after every change (at least every few seconds), for TIMEOUT seconds;
        fails as soon as an Argo CD component has exited."""
        for apps in kubeapi.snapshots(self.api(), self.applications(), timeout=timeout,
                                      field_selector=f"metadata.name={name}"):
            self.check_argocd()
            yield apps.get(name) or {}

    def wait_app(self, name: str, want: Callable[[dict[str, Any]], bool], timeout: float, what: str) -> dict[str, Any]:
        last_report = time.monotonic()
        app: dict[str, Any] = {}
        for app in self.watch_app(name, timeout):
            if app and want(app):
                return app
            if time.monotonic() - last_report > 10:
                self.log(f"  waiting for {name}: {summary(app)}")
                last_report = time.monotonic()
        raise SuiteFailure(f"Application {name} not {what} within {timeout:.0f}s: {summary(app)}",
                           f"Argo CD logs: {self.argocd.logs_dir}")

    # -- steps --------------------------------------------------------------------------------
    def serve_git(self) -> str:
        commit = self.git.snapshot(paths.repo_root())
        # An air-gapped user's commit: the environment's values use the cluster's image mirror, and the
        # AppProject names this repository (overlays/argocd/appproject.yaml says: change it there only).
        mirror = yaml.safe_load(self.suite.extra_values[0].read_text()) if self.suite.extra_values else {}

        def edit(work: Path) -> None:
            values = work / "overlays" / self.env / "values.yaml"
            merged = merge(yaml.safe_load(values.read_text()) or {}, mirror)
            values.write_text(f"# {self.env}, on the local cluster: images from its mirror\n"
                              + yaml.safe_dump(merged, sort_keys=False))
            project = work / "overlays" / "argocd" / "appproject.yaml"
            text = project.read_text()
            old = yaml.safe_load(text)["spec"]["sourceRepos"][0]
            project.write_text(text.replace(old, GIT_URL))

        commit = self.git.commit(f"{self.env}: the local cluster's image mirror; this repository", edit)
        self._start("git-daemon", ["git", "daemon", "--reuseaddr", "--export-all", "--listen=127.0.0.1",
                                   f"--port={GIT_PORT}", f"--base-path={self.git.bare.parent}", str(self.git.bare.parent)],
                    GIT_PORT)
        probe = subprocess.run([*self.kube.sandbox.enter_net(), "git", "ls-remote", GIT_URL, BRANCH],
                               capture_output=True, text=True, timeout=30)
        if commit not in probe.stdout:
            raise SuiteFailure(f"git ls-remote {GIT_URL} does not show {commit[:12]}: {probe.stderr.strip()[-200:]}")
        return f"{GIT_URL} (git daemon in the cluster's namespace) at {commit[:12]}"

    def publish_chart(self) -> str:
        from ..cluster import node as nodemod

        pki = self.kube.cluster_dir / "pki"
        crt, key = nodemod.sign_cert(pki, "chart-registry", "/CN=trainstack-chart-registry", ips=("127.0.0.1",))
        config = nodemod.registry_config(self.run_dir / "chart-registry", f"127.0.0.1:{CHART_REGISTRY_PORT}")
        config["http"]["tls"] = {"certificate": str(crt), "key": str(key)}
        (self.run_dir / "chart-registry.yaml").write_text(yaml.safe_dump(config))
        self._start("chart-registry", [str(tools.require("registry", self.lock)), "serve",
                                       str(self.run_dir / "chart-registry.yaml")], CHART_REGISTRY_PORT)
        # `trainstack chart publish` as a user runs it against their registry (TLS, their CA trusted).
        env = {**helm.env(self.lock), "SSL_CERT_FILE": str(self.kube.ca_cert), "TRAINSTACK_ROOT": str(paths.repo_root())}
        result = subprocess.run([*self.kube.sandbox.enter_net(), sys.executable, "-m", "trainstack", "chart", "publish",
                                 "--registry", CHART_REPO, "--output", "json"],
                                capture_output=True, text=True, env=env, timeout=300)
        if result.returncode != 0:
            raise SuiteFailure(f"trainstack chart publish: {output_line(result.stderr, markers=(), limit=300)}")
        published = json.loads(result.stdout)
        self.chart_version = published["version"]
        return f"{published['reference']}:{published['version']} ({published['digest'][:19]}...), {published['action']}"

    def install_argocd(self) -> str:
        crds, install = argocd_manifests(self.lock)
        self.kube.kubectl("create", "namespace", ARGOCD_NS, check=False)
        self.apply(crds)
        self.wait_established([c["metadata"]["name"] for c in crds])
        # overlays/argocd/install as a Component over upstream's install.yaml, the way its README says
        build = self.run_dir / "argocd-install"
        shutil.rmtree(build, ignore_errors=True)
        build.mkdir(parents=True)
        (build / "install.yaml").write_text(install)
        component = self.git.work / "overlays" / "argocd" / "install"
        (build / "kustomization.yaml").write_text(yaml.safe_dump({
            "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "namespace": ARGOCD_NS,
            "resources": ["install.yaml"], "components": [os.path.relpath(component, build)]}))
        rendered = helm.run(["build", str(build), "--load-restrictor", "LoadRestrictionsNone"], lock=self.lock,
                            binary="kustomize").stdout
        objects = [d for d in yamlio.load_all(rendered) if isinstance(d, dict)]
        keep = {"ConfigMap", "Secret", "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}
        config = [o for o in objects if o.get("kind") in keep]
        for obj in config:
            if obj["kind"] == "ConfigMap" and obj["metadata"]["name"] == "argocd-cm":
                obj.setdefault("data", {}).update({"timeout.reconciliation": f"{RECONCILE_S}s",
                                                    "timeout.reconciliation.jitter": "0s"})
        self.apply(config)
        repo_server = next(o for o in objects if o.get("kind") == "Deployment"
                           and o["metadata"]["name"] == "argocd-repo-server")
        sidecars = [c["name"] for c in repo_server["spec"]["template"]["spec"]["containers"]]
        cm = next(o for o in config if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "argocd-cm")
        health = sorted(k.removeprefix("resource.customizations.health.") for k in cm["data"]
                        if k.startswith("resource.customizations.health."))
        return (f"{len(crds)} CRDs ({self.lock.source('argocd').version}); {len(config)} configuration objects from "
                f"install.yaml + overlays/argocd/install (health checks: {', '.join(health)}; repo-server containers "
                f"{', '.join(sidecars)}: run here as processes)")

    def start_argocd(self) -> str:
        plugin = (self.git.work / "overlays" / "argocd" / "cmp-plugin.yaml").read_text()
        return self.argocd.start(plugin)

    def cluster_secret(self) -> dict[str, Any]:
        config = yaml.safe_load(self.kube.kubeconfig.read_text())
        user = config["users"][0]["user"]

        def data(field: str) -> str:
            if f"{field}-data" in user:
                return user[f"{field}-data"]
            return base64.b64encode(Path(user[field]).read_bytes()).decode()

        tls = {"caData": base64.b64encode(self.kube.ca_cert.read_bytes()).decode(),
               "certData": data("client-certificate"), "keyData": data("client-key")}
        return {
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "cluster-local", "namespace": ARGOCD_NS,
                         "labels": {"argocd.argoproj.io/secret-type": "cluster", "trainstack.io/environment": self.env}},
            "stringData": {"name": "local", "server": self.kube.server(),
                           "config": json.dumps({"tlsClientConfig": tls})},
        }

    def register(self) -> str:
        repo = {"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "repo-trainstack", "namespace": ARGOCD_NS,
                             "labels": {"argocd.argoproj.io/secret-type": "repository"}},
                "stringData": {"type": "git", "url": GIT_URL}}
        self.apply([self.cluster_secret(), repo])
        objects = [d for d in yaml.safe_load_all(helm.run(["build", str(self.git.work / "overlays" / "argocd")],
                                                          lock=self.lock, binary="kustomize").stdout)
                   if isinstance(d, dict)]
        self.apply(objects)

        def mine(apps: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
            return [a for a in apps.values() if (a["metadata"].get("labels") or {}).get("trainstack.io/environment")
                    == self.env]

        found = kubeapi.wait_for(self.api(), self.applications(), lambda apps: mine(apps) and apps, 60)
        if found:
            generated = mine(found)[0]
            self.app = generated["metadata"]["name"]
            others = sorted(n for n in found if n != self.app)
            source = generated["spec"]["source"]
            return (f"ApplicationSet generated {self.app} ({source['repoURL']} {source['path']}@"
                    f"{source['targetRevision']}, plugin {source.get('plugin', {}).get('name')})"
                    + (f"; also {', '.join(others)}" if others else "; none for the other environments"))
        appset = kubeapi.named(self.api(), self.listing("applicationsets", ARGOCD_NS), "trainstack") or {}
        raise SuiteFailure(f"the ApplicationSet generated no Application for env {self.env}: "
                           f"{(appset.get('status') or {}).get('conditions')}")

    def synced_healthy(self) -> str:
        start = time.monotonic()
        app = self.wait_app(self.app, lambda a: synced(a) and healthy(a) and op_phase(a) == "Succeeded", 420,
                            "Synced and Healthy")
        self.revision = app["status"]["sync"]["revision"]
        # Argo CD asks the plugin again for this commit as the sync's CRDs change the API list: the
        # plugin's render cache answers those from the first render
        runs = self.first_sync_generates = self.argocd.plugin_generates()
        return (f"Synced at {self.revision[:12]}, Healthy, {len(app['status'].get('resources', []))} resources, "
                f"in {time.monotonic() - start:.0f}s; the plugin generated {len(runs)} times, rendered "
                f"{runs.count(False)}, reused the render {runs.count(True)}")

    def sync_waves(self) -> str:
        app = self.application()
        results = (((app.get("status") or {}).get("operationState") or {}).get("syncResult") or {}).get("resources") or []
        rendered = {(o["kind"], o["metadata"]["name"]): o for o in self.live_objects(results)}
        order = [(wave(rendered[(r["kind"], r["name"])]), r["kind"], r["name"]) for r in results
                 if (r["kind"], r["name"]) in rendered]
        if len(order) < 10:
            raise SuiteFailure(f"the operation result lists {len(order)} resources")
        waves = [w for w, _, _ in order]
        if waves != sorted(waves):
            i = next(i for i in range(1, len(waves)) if waves[i] < waves[i - 1])
            raise SuiteFailure(f"applied out of wave order: {order[i - 1][1]}/{order[i - 1][2]} (wave {waves[i - 1]}) "
                               f"before {order[i][1]}/{order[i][2]} (wave {waves[i]})")
        firsts: dict[int, list[str]] = {}
        for w, kind, _ in order:
            kinds = firsts.setdefault(w, [])
            if kind not in kinds:
                kinds.append(kind)
        return "; ".join(f"wave {w}: {', '.join(k)}" for w, k in sorted(firsts.items()))

    def live_objects(self, results: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The objects the operation applied, as they are in the cluster (their wave annotations)."""
        kinds = sorted({(r.get("group", ""), r["kind"]) for r in results})
        resources = [f"{kind.lower()}{'.' + group if group else ''}" for group, kind in kinds]
        # one kubectl for every kind (a dozen processes took seconds); kind by kind if one is unknown
        got = self.kube.kubectl("get", ",".join(resources), "-A", "-o", "json", check=False, timeout=60)
        if got.returncode == 0:
            return json.loads(got.stdout)["items"]
        out = []
        for resource in resources:
            got = self.kube.kubectl("get", resource, "-A", "-o", "json", check=False, timeout=60)
            if got.returncode == 0:
                out += json.loads(got.stdout)["items"]
        return out

    def crds_server_side(self) -> str:
        sizes = []
        for name in TRAINER_CRDS:
            crd = kubeapi.named(self.api(), self.crds(), name) or {"metadata": {"name": name}, "spec": {}}
            annotations = crd["metadata"].get("annotations") or {}
            if "kubectl.kubernetes.io/last-applied-configuration" in annotations:
                raise SuiteFailure(f"CRD {name} carries a client-side last-applied annotation")
            managers = {(m.get("manager"), m.get("operation")) for m in crd["metadata"].get("managedFields") or []}
            if ("argocd-controller", "Apply") not in managers:
                raise SuiteFailure(f"CRD {name} was not applied server-side by Argo CD: managers {sorted(managers)}")
            sizes.append(len(json.dumps(crd["spec"])))
        # the limit a client-side apply hits: the whole object in a 256 KiB annotation
        over = sum(1 for s in sizes if s > 262144)
        listed = ", ".join(f"{n.split('.')[0]} {s / 1e6:.2f} MB" for n, s in zip(TRAINER_CRDS, sizes, strict=True))
        return f"{listed}; {over} over the 256 KiB annotation limit; field manager argocd-controller (Apply)"

    def no_drift(self) -> str:
        seen: list[str] = []
        app: dict[str, Any] = {}
        for app in self.watch_app(self.app, 6 * RECONCILE_S + 60):
            at = (app.get("status") or {}).get("reconciledAt", "")
            if not seen:
                seen.append(at)
            elif at and at != seen[-1]:
                seen.append(at)
                if not synced(app):
                    drift = [f"{r['kind']}/{r['name']}" for r in app["status"].get("resources", [])
                             if r.get("status") != "Synced"]
                    raise SuiteFailure(f"OutOfSync after a reconcile at {at}: {', '.join(drift) or summary(app)}")
            if len(seen) == 3:
                break
        else:
            raise SuiteFailure(f"the application controller did not reconcile twice within "
                               f"{6 * RECONCILE_S + 60}s (reconciledAt {seen})")
        bundles = 0
        for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
            for item in self.suite.read(kind):
                bundles += sum(1 for w in item.get("webhooks") or [] if (w.get("clientConfig") or {}).get("caBundle"))
        ops = app["status"].get("operationState", {}).get("operation", {}).get("sync", {}).get("revision", "")
        return (f"Synced at reconciles {', '.join(seen)}; {bundles} webhook caBundles written by the controllers, "
                f"ignored; last sync of {ops[:12] or 'the same revision'}")

    def health_runtime(self) -> dict[str, Any]:
        """The golden runtime the TrainJobs from git use: CPU torch, one pod template."""
        return next(r for r in suitemod.golden_runtimes(self.suite.rendered)
                    if "torch" in suitemod.ml_policies(r) and not suitemod.is_gpu(r) and len(suitemod.pod_specs(r)) == 1)

    def trainjob_health(self) -> str:
        s = self.suite
        runtime = self.health_runtime()
        image = images.reference("python", self.lock)
        ok = SmokeJob("gitops-ok", runtime, num_nodes=1, labels=s.job_labels, image=image)
        # runs long enough for Argo CD to record it Progressing after the sync, then Completes
        ok.command = ["python3", "-c", "import time; time.sleep(5); print('trainstack gitops')"]
        failing_runtime = s.failing_runtime(simulated=False)
        bad = SmokeJob("gitops-fails", failing_runtime, num_nodes=1, labels=s.job_labels, image=image)
        bad.command = ["python3", "-c", "import sys; sys.exit(3)"]
        # the runtime before the TrainJob that names it (the Trainer webhook checks it exists)
        failing_runtime["metadata"]["annotations"] = {"argocd.argoproj.io/sync-wave": "-1"}
        documents = [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SMOKE_NS}},
            failing_runtime, ok.manifest(SMOKE_NS), bad.manifest(SMOKE_NS),
        ]

        def edit(work: Path) -> None:
            folder = work / JOBS_PATH
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "trainjobs.yaml").write_text(yaml.safe_dump_all(documents, sort_keys=False))

        renders = self.argocd.plugin_renders()
        commit = self.git.commit("e2e: TrainJobs from git", edit)
        project = {"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
                   "metadata": {"name": "e2e-jobs", "namespace": ARGOCD_NS},
                   "spec": {"sourceRepos": [GIT_URL], "destinations": [{"server": "*", "namespace": SMOKE_NS}],
                            "clusterResourceWhitelist": [{"group": "", "kind": "Namespace"}],
                            "namespaceResourceWhitelist": [{"group": suitemod.GROUP, "kind": "TrainJob"},
                                                           {"group": suitemod.GROUP, "kind": "TrainingRuntime"}]}}
        app = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
               "metadata": {"name": JOBS_APP, "namespace": ARGOCD_NS},
               "spec": {"project": "e2e-jobs",
                        "source": {"repoURL": GIT_URL, "targetRevision": BRANCH, "path": JOBS_PATH},
                        "destination": {"server": self.kube.server(), "namespace": SMOKE_NS},
                        "syncPolicy": {"automated": {}, "syncOptions": ["ServerSideApply=true"]}}}
        self.apply([project, app])
        seen: dict[str, list[str]] = {"gitops-ok": [], "gitops-fails": []}
        current: dict[str, Any] = {}
        for current in self.watch_app(JOBS_APP, max(240, s.provider.job_timeout)):
            for res in (current.get("status") or {}).get("resources") or []:
                if res.get("kind") == "TrainJob" and res["name"] in seen:
                    state = (res.get("health") or {}).get("status", "")
                    if state and (not seen[res["name"]] or seen[res["name"]][-1] != state):
                        seen[res["name"]].append(state)
            if seen["gitops-ok"][-1:] == ["Healthy"] and seen["gitops-fails"][-1:] == ["Degraded"]:
                break
        else:
            raise SuiteFailure(f"TrainJob health from Argo CD: {seen} (want gitops-ok Progressing then Healthy, "
                               f"gitops-fails Degraded)")
        if "Progressing" not in seen["gitops-ok"]:
            raise SuiteFailure(f"gitops-ok was never Progressing in Argo CD: {seen['gitops-ok']}")
        self.trainjobs = ["gitops-ok", "gitops-fails"]
        app_health = (current["status"].get("health") or {}).get("status")
        # The commit touched none of the platform's manifest-generate-paths: its Application moves to
        # the new revision on Argo CD's cached manifests, without running the plugin again.
        self.wait_app(self.app, lambda a: synced(a) and a["status"]["sync"].get("revision") == commit, 60,
                      f"Synced at {commit[:12]}")
        again = self.renders["outside"] = self.argocd.plugin_renders() - renders
        if again:
            raise SuiteFailure(f"a commit outside the platform's manifest-generate-paths rendered it {again} more "
                               f"time(s) (cmp-server log: {self.argocd.logs_dir / 'argocd-cmp-server.log'})")
        return (f"commit {commit[:12]}; gitops-ok {' -> '.join(seen['gitops-ok'])}; gitops-fails "
                f"{' -> '.join(seen['gitops-fails'])}; Application {JOBS_APP} {app_health}; {self.app} Synced "
                f"at {commit[:12]} without rendering again")

    def commit_reaches_cluster(self) -> str:
        deploy = self.trainer_deployment()
        before = deploy["spec"].get("replicas", 1)
        wanted = before + 1

        def edit(work: Path) -> None:
            values = work / "overlays" / self.env / "values.yaml"
            data = yaml.safe_load(values.read_text()) or {}
            node = data
            for key in REPLICAS_VALUE[:-1]:
                node = node.setdefault(key, {})
            node[REPLICAS_VALUE[-1]] = wanted
            values.write_text(yaml.safe_dump(data, sort_keys=False))

        start = time.monotonic()
        renders = self.argocd.plugin_renders()
        commit = self.git.commit(f"{self.env}: {'.'.join(REPLICAS_VALUE)}={wanted}", edit)
        # Argo CD polls git every reconcile (no webhook here): the new revision, synced
        self.wait_app(self.app, lambda a: synced(a) and a["status"]["sync"].get("revision") == commit
                      and op_phase(a) == "Succeeded" and a["status"].get("operationState", {}).get(
                          "syncResult", {}).get("revision") == commit, 300, f"Synced at {commit[:12]}")
        after = self.trainer_deployment()["spec"].get("replicas", 1)
        self.replicas = (before, after)
        if after != wanted:
            raise SuiteFailure(f"Deployment {deploy['metadata']['name']} has {after} replicas after the sync, want {wanted}")
        rendered = self.renders["inside"] = self.argocd.plugin_renders() - renders
        if not rendered:  # the commit is inside overlays/<env>: the plugin must have run for it
            raise SuiteFailure(f"commit {commit[:12]} synced without the plugin rendering it (cmp-server log: "
                               f"{self.argocd.logs_dir / 'argocd-cmp-server.log'})")
        return (f"commit {commit[:12]} ({'.'.join(REPLICAS_VALUE)}: {before} -> {wanted}) synced in "
                f"{time.monotonic() - start:.0f}s ({rendered} plugin render(s)); Deployment "
                f"{deploy['metadata']['name']} replicas {after}")

    def trainer_deployment(self) -> dict[str, Any]:
        for item in self.deployments():
            images = [c.get("image", "") for c in item["spec"]["template"]["spec"]["containers"]]
            if any("trainer-controller-manager" in i for i in images):
                return item
        raise SuiteFailure(f"no Trainer controller Deployment in {NAMESPACE}")

    def published_chart(self) -> str:
        """Git holds only values and a kustomization naming the published chart; Argo CD's kustomize inflates it."""
        # The generated Application goes (its cluster label removed): preserveResourcesOnDeletion keeps the platform.
        self.kube.kubectl("label", "secret", "cluster-local", "-n", ARGOCD_NS, "trainstack.io/environment-")
        if not kubeapi.wait_for(self.api(), self.applications(), lambda apps: self.app not in apps, 60):
            raise SuiteFailure(f"{self.app} still there 60s after its cluster lost its label")
        left = len(self.deployments())
        if not left:
            raise SuiteFailure("removing the cluster's label deleted the platform's Deployments")

        def edit(work: Path) -> None:
            from .. import render as rendermod

            folder = work / PUBLISHED_PATH
            folder.mkdir(parents=True, exist_ok=True)
            # the environment's values files, in its kustomization's order, copied next to the new
            # kustomization (Argo CD's kustomize reads no file outside the folder it builds)
            names = []
            for i, source in enumerate(rendermod.values_files(self.env, root=work)):
                name = source.name if source.name not in names else f"{i}-{source.name}"
                shutil.copy(source, folder / name)
                names.append(name)
            (folder / "kustomization.yaml").write_text(yaml.safe_dump(published_kustomization(
                self.env, CHART_REPO, self.chart_version, Path("../../../overlays/base"), names), sort_keys=False))

        commit = self.git.commit(f"{self.env}: the published chart {self.chart_version}", edit)
        appset = next(d for d in yaml.safe_load_all(helm.run(["build", str(self.git.work / "overlays" / "argocd")],
                                                             lock=self.lock, binary="kustomize").stdout)
                      if isinstance(d, dict) and d.get("kind") == "ApplicationSet")
        spec = copy.deepcopy(appset["spec"]["template"]["spec"])
        spec["source"] = {"repoURL": GIT_URL, "targetRevision": BRANCH, "path": PUBLISHED_PATH}
        spec["destination"]["server"] = self.kube.server()
        app = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
               "metadata": {"name": PUBLISHED_APP, "namespace": ARGOCD_NS,
                            "finalizers": ["resources-finalizer.argocd.argoproj.io"]},
               "spec": spec}
        self.apply([app])
        start = time.monotonic()
        got = self.wait_app(PUBLISHED_APP, lambda a: synced(a) and healthy(a) and op_phase(a) == "Succeeded", 300,
                            "Synced and Healthy")
        # the objects are now the published chart's Application's (Argo CD's tracking annotation)
        tracked = [d["metadata"]["name"] for d in self.deployments()
                   if not ((d["metadata"].get("annotations") or {}).get("argocd.argoproj.io/tracking-id", "")
                           .startswith(f"{PUBLISHED_APP}:"))]
        if tracked:
            raise SuiteFailure(f"Deployments not taken over by {PUBLISHED_APP}: {', '.join(tracked)}")
        return (f"{PUBLISHED_PATH} at {commit[:12]}: helmCharts {CHART_REPO}/trainstack {self.chart_version} + "
                f"overlays/base; Synced and Healthy in {time.monotonic() - start:.0f}s, "
                f"{len(got['status'].get('resources', []))} resources; {left} Deployments kept when the "
                f"ApplicationSet's Application went")

    def delete_application(self) -> str:
        before = self.trainjob_names()
        # the jobs' own Application goes first, without cascading: the TrainJobs are the teams', not the release's
        self.kube.kubectl("delete", "applications.argoproj.io", JOBS_APP, "-n", ARGOCD_NS, "--wait=true", timeout=120)
        self.kube.kubectl("delete", "applications.argoproj.io", PUBLISHED_APP, "-n", ARGOCD_NS, "--wait=true",
                          "--timeout=180s", timeout=200)
        deadline = time.monotonic() + 120
        deployments = self.listing("deployments", NAMESPACE)
        runtimes = self.listing("clustertrainingruntimes")
        for listed in (deployments, runtimes):
            if not kubeapi.wait_for(self.api(), listed, lambda found: not found, max(1.0, deadline - time.monotonic())):
                left = [d["metadata"]["name"] for d in kubeapi.items(self.api(), deployments)]
                raise SuiteFailure(f"the release's objects are still there after the Application was deleted: "
                                   f"Deployments {left}, {len(kubeapi.items(self.api(), runtimes))} "
                                   f"ClusterTrainingRuntimes")
        crds = [o["metadata"]["name"] for o in self.suite.rendered if o.get("kind") == "CustomResourceDefinition"]
        have = {c["metadata"]["name"] for c in kubeapi.items(self.api(), self.crds())}
        gone = [c for c in crds if c not in have]
        if gone:
            raise SuiteFailure(f"deleting the Application deleted CRDs: {', '.join(gone)}")
        after = self.trainjob_names()
        if before - after:
            raise SuiteFailure(f"TrainJobs gone after deleting the Application: {', '.join(sorted(before - after))}")
        return (f"Deployments and ClusterTrainingRuntimes removed; {len(crds)} CRDs kept; TrainJobs kept: "
                f"{', '.join(sorted(after)) or 'none'}")


def published_kustomization(env: str, repo: str, version: str, base: Path,
                            values: list[str] | None = None) -> dict[str, Any]:
    """An environment that deploys the published chart: git holds this file and its values files only
    (`values`, in Helm's order; by default values.yaml)."""
    values = values or ["values.yaml"]
    chart: dict[str, Any] = {"name": "trainstack", "repo": repo, "version": version, "releaseName": "trainstack",
                             "namespace": NAMESPACE, "includeCRDs": True, "valuesFile": values[0]}
    if values[1:]:
        chart["additionalValuesFiles"] = values[1:]
    return {
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "components": [str(base)],
        "helmCharts": [chart],
        "labels": [{"pairs": {"trainstack.io/environment": env}, "includeSelectors": False}],
    }


def synced(app: dict[str, Any]) -> bool:
    return ((app.get("status") or {}).get("sync") or {}).get("status") == "Synced"


def healthy(app: dict[str, Any]) -> bool:
    return ((app.get("status") or {}).get("health") or {}).get("status") == "Healthy"


def op_phase(app: dict[str, Any]) -> str:
    return ((app.get("status") or {}).get("operationState") or {}).get("phase", "")


def summary(app: dict[str, Any]) -> str:
    if not app:
        return "no Application"
    status = app.get("status") or {}
    op = status.get("operationState") or {}
    conditions = [f"{c.get('type')}: {c.get('message', '')[:200]}" for c in status.get("conditions") or []]
    unhealthy = [f"{r['kind']}/{r['name']} {(r.get('health') or {}).get('status')}"
                 for r in status.get("resources") or [] if (r.get("health") or {}).get("status") not in (None, "Healthy")]
    return (f"sync {(status.get('sync') or {}).get('status')}, health {(status.get('health') or {}).get('status')}, "
            f"operation {op.get('phase', '-')} {op.get('message', '')[:200]}"
            + (f"; {'; '.join(conditions)}" if conditions else "")
            + (f"; not healthy: {', '.join(unhealthy[:5])}" if unhealthy else ""))


def check_args(args: Any) -> None:
    """`e2e --gitops` runs on the local provider's real node; one line for anything else, before anything starts."""
    if args.provider != "local":
        raise UserError(f"--gitops runs on --provider local, not {args.provider}",
                        "Argo CD's components run inside the local cluster's network namespace", exit_code=2)
    if args.nodes not in (None, "real"):
        raise UserError(f"--gitops runs on the real node (--nodes real), not --nodes {args.nodes}",
                        "the controllers Argo CD deploys must really run", exit_code=2)
    if getattr(args, "upgrade_from", None) or args.data_cache:
        raise UserError("--gitops cannot be combined with --upgrade-from or --data-cache", exit_code=2)
    lock = lockmod.load()
    for binary in ("argocd", "registry"):
        if tools.find(binary, lock) is None:
            tool = lock.tool_for_binary(binary)
            raise UserError(f"{binary} {tool.version} is not installed",
                            f"run 'make setup-gitops' (or 'trainstack tools install {tool.name}')")
    if not shutil.which("redis-server") or not shutil.which("git"):
        raise UserError("--gitops needs git and redis-server (the lock's Debian package)",
                        "run 'make setup-gitops' (trainstack node prereqs installs redis-server)")
    args.nodes = "real"


# -- `trainstack bench gitops` ------------------------------------------------------------------
GOAL_SECONDS = 180.0


def argocd_build_seconds(lock: lockmod.Lock, cold: bool = False) -> dict[str, Any]:
    """Argo CD's build time: as its tool stamp recorded it (the build that installed it), or, with cold,
    a fresh build into an empty tool cache and Go build cache (module downloads stay cached)."""
    import tempfile

    tool = lock.tool("argocd")
    try:
        stamp = json.loads((tools.tool_dir(tool) / tools.STAMP).read_text())
    except (OSError, ValueError):
        stamp = {}
    out: dict[str, Any] = {"argocd_recorded_build_seconds": stamp.get("seconds"),
                           "argocd_version": tool.version, "go_toolchain": tool.go_toolchain}
    if cold:
        with tempfile.TemporaryDirectory(prefix="trainstack-cold-argocd-") as tmp:
            env = dict(os.environ, TRAINSTACK_CACHE=str(Path(tmp) / "cache"), GOCACHE=str(Path(tmp) / "go-build"))
            start = time.monotonic()
            result = subprocess.run([sys.executable, "-m", "trainstack", "tools", "install", "argocd"],
                                    cwd=paths.repo_root(), env=env, capture_output=True, text=True, timeout=4 * 3600)
            if result.returncode != 0:
                raise UserError(f"cold build of Argo CD failed: {output_line(result.stderr, markers=())}")
            out["argocd_cold_build_seconds"] = round(time.monotonic() - start, 1)
    return out


def bench(args: Any) -> dict[str, Any]:
    """Warm `make e2e-gitops` (bar: GOAL_SECONDS) and Argo CD's build time."""
    import tempfile

    lock = lockmod.load()
    build = argocd_build_seconds(lock, cold=bool(getattr(args, "cold", False)))
    if tools.find("argocd", lock) is None:
        return {"summary": "skipped: Argo CD is not built (make setup-gitops)", **build}
    with tempfile.TemporaryDirectory() as tmp:
        summary_file = Path(tmp) / "summary.json"
        env = dict(os.environ, TRAINSTACK_E2E_SUMMARY=str(summary_file))
        start = time.monotonic()
        result = subprocess.run(["make", "e2e-gitops", "ENV=dev"], cwd=paths.repo_root(), env=env,
                                capture_output=True, text=True, timeout=3600)
        seconds = round(time.monotonic() - start, 1)
        steps = json.loads(summary_file.read_text()).get("steps", []) if summary_file.is_file() else []
    if result.returncode != 0:
        said = output_line(result.stderr or result.stdout, markers=(), empty=f"exit {result.returncode}")
        raise UserError(f"make e2e-gitops failed during the bench: {said}")
    if build.get("argocd_cold_build_seconds"):
        built = f"Argo CD cold build {build['argocd_cold_build_seconds']:.0f}s"
    else:  # the stamp's: the build that installed it, cold or not (a relink with a warm Go cache is seconds)
        built = f"Argo CD's last build {build.get('argocd_recorded_build_seconds')}s (cold: --cold)"
    return {
        "summary": f"warm make e2e-gitops {seconds:.1f}s (bar {GOAL_SECONDS:.0f}s); {built}",
        "warm_seconds": seconds, "goal_seconds": GOAL_SECONDS, "meets_goal": seconds <= GOAL_SECONDS,
        "steps": steps, **build,
    }
