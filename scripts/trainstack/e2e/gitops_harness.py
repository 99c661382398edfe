"""The Argo CD side of `e2e --gitops`: the suite's state, the git repository and the chart registry
served in the cluster's namespace, Argo CD installed and running, and the Applications read and
waited on with the kubernetes client (watches, not polling). The checks are e2e/gitops.py's."""

from __future__ import annotations

import base64
import copy
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from .. import helm, kubeapi, overlaysync, paths, proc, tools, yamlio
from .. import lock as lockmod
from ..cluster import node as nodemod
from ..cluster import sandbox as sandboxmod
from ..errors import output_line
from ..jsontypes import dig
from .argocd import ARGOCD_NS, RECONCILE_S, ArgoCD, argocd_manifests
from .base import NAMESPACE, SMOKE_NS, SuiteFailure
from .gitops_apps import summary
from .gitrepo import BRANCH, GIT_PORT, GIT_URL, GitRepo
from .suite import Suite

CHART_REGISTRY_PORT = 5443
CHART_REPO = f"oci://127.0.0.1:{CHART_REGISTRY_PORT}/charts"


def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out



class GitOpsHarness:
    """What the gitops steps stand on (GitOpsSuite adds the checks): the Suite, the git repository, Argo CD;
    the setup steps up to the generated Application."""

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
        self.procs: dict[str, proc.Popen] = {}
        self.app = ""  # the generated Application's name
        self.chart_version = ""
        self.trainjobs: list[str] = []
        self.value_change: tuple[int, int] = (0, 0)  # the committed value, before and after the sync
        self.revision = ""
        # the repo-server's renders of the platform caused by a commit outside / inside its manifest-generate-paths
        self.renders: dict[str, int] = {}
        # its renders of the platform during the first sync, and the objects of its render that differ from
        # `trainstack render`'s
        self.first_sync_renders = 0
        self.render_diff: list[str] = []

    @property
    def steps(self):
        return self.suite.steps

    @property
    def kube(self):
        return self.suite.kube

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
                                                      for k in dig(c, "status", "conditions") or [])}

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
        raise SuiteFailure(f"Application {name} not {what} within {timeout:.0f}s: {summary(app)}"
                           f"{self.suite.platform_pods()}", f"Argo CD logs: {self.argocd.logs_dir}")

    # -- setup steps --------------------------------------------------------------------------
    def serve_git(self) -> str:
        commit = self.git.snapshot(paths.repo_root())
        # An air-gapped user's commit: the environment's values use the cluster's image mirror, and the
        # AppProject names this repository (overlays/argocd/appproject.yaml says: change it there only).
        mirror = yamlio.load(self.suite.extra_values[0].read_text()) if self.suite.extra_values else {}

        def edit(work: Path) -> None:
            values = work / "overlays" / self.env / "values.yaml"
            merged = merge(yamlio.load(values.read_text()) or {}, mirror)
            values.write_text(f"# {self.env}, on the local cluster: images from its mirror\n"
                              + yaml.safe_dump(merged, sort_keys=False))
            project = work / "overlays" / "argocd" / "appproject.yaml"
            text = project.read_text()
            old = yamlio.load(text)["spec"]["sourceRepos"][0]
            project.write_text(text.replace(old, GIT_URL))
            # what an air-gapped user writes once (releases.yaml's chartRepository) and `make generate` carries
            # into every environment's kustomization: the chart comes from their registry
            releases = work / "releases.yaml"
            releases.write_text(re.sub(r"(?m)^chartRepository: .*$", f"chartRepository: {CHART_REPO}",
                                       releases.read_text()))
            overlaysync.write(work)

        commit = self.git.commit(f"{self.env}: the local cluster's image mirror and chart registry; this repository",
                                 edit)
        self._start("git-daemon", ["git", "daemon", "--reuseaddr", "--export-all", "--listen=127.0.0.1",
                                   f"--port={GIT_PORT}", f"--base-path={self.git.bare.parent}", str(self.git.bare.parent)],
                    GIT_PORT)
        probe = proc.run([*self.kube.sandbox.enter_net(), "git", "ls-remote", GIT_URL, BRANCH], check=False,
                         timeout=30)
        if commit not in probe.stdout:
            raise SuiteFailure(f"git ls-remote {GIT_URL} does not show {commit[:12]}: {probe.stderr.strip()[-200:]}")
        return f"{GIT_URL} (git daemon in the cluster's namespace) at {commit[:12]}"

    def publish_chart(self) -> str:
        pki = self.kube.cluster_dir / "pki"
        crt, key = nodemod.sign_cert(pki, "chart-registry", "/CN=trainstack-chart-registry", ips=("127.0.0.1",))
        config = nodemod.registry_config(self.run_dir / "chart-registry", f"127.0.0.1:{CHART_REGISTRY_PORT}")
        config["http"]["tls"] = {"certificate": str(crt), "key": str(key)}
        (self.run_dir / "chart-registry.yaml").write_text(yaml.safe_dump(config))
        self._start("chart-registry", [str(tools.require("registry", self.lock)), "serve",
                                       str(self.run_dir / "chart-registry.yaml")], CHART_REGISTRY_PORT)
        # `trainstack chart publish` as a user runs it against their registry (TLS, their CA trusted).
        env = {**helm.env(self.lock), "SSL_CERT_FILE": str(self.kube.ca_cert), "TRAINSTACK_ROOT": str(paths.repo_root())}
        result = proc.run([*self.kube.sandbox.enter_net(), sys.executable, "-m", "trainstack", "chart", "publish",
                           "--registry", CHART_REPO, "--output", "json"], check=False, env=env, timeout=300)
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
        return self.argocd.start()

    def cluster_secret(self) -> dict[str, Any]:
        config = yamlio.load(self.kube.kubeconfig.read_text())
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
        objects = [d for d in yamlio.load_all(helm.run(["build", str(self.git.work / "overlays" / "argocd")],
                                                          lock=self.lock, binary="kustomize").stdout)
                   if isinstance(d, dict)]
        self.apply(objects)

        def mine(apps: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
            return [a for a in apps.values() if dig(a["metadata"], "labels", "trainstack.io/environment")
                    == self.env]

        found = kubeapi.wait_for(self.api(), self.applications(), lambda apps: mine(apps) and apps, 60)
        if found:
            generated = mine(found)[0]
            self.app = generated["metadata"]["name"]
            others = sorted(n for n in found if n != self.app)
            source = generated["spec"]["source"]
            return (f"ApplicationSet generated {self.app} ({source['repoURL']} {source['path']}@"
                    f"{source['targetRevision']}, {'plugin ' + source['plugin']['name'] if 'plugin' in source else 'no plugin'})"
                    + (f"; also {', '.join(others)}" if others else "; none for the other environments"))
        appset = kubeapi.named(self.api(), self.listing("applicationsets", ARGOCD_NS), "trainstack") or {}
        raise SuiteFailure(f"the ApplicationSet generated no Application for env {self.env}: "
                           f"{dig(appset, 'status', 'conditions')}")
