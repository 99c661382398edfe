"""`trainstack migrate from-upstream --release NAME [--dry-run]`: hand a cluster running upstream's
kubeflow-trainer chart over to trainstack without deleting CRDs or TrainJobs.

Upstream's chart ships the Trainer CRDs as templates of its release (so `helm uninstall` of it
would delete them, and with them every TrainJob) and, when runtimes are enabled, installs them with
a post-install hook Job. The handover, in order:

1. keep the CRDs: `helm.sh/resource-policy: keep` and no release ownership (trainstack ships them
   in crds/, where no release owns them); then the new CRDs are applied server-side;
2. adopt what trainstack renders under the same kind, namespace and name (Services, ConfigMaps,
   webhook configurations, RBAC, runtimes of the same name): Helm's ownership annotations are set
   to the trainstack release, so `helm install` takes them over instead of refusing;
3. forget the upstream release: its release records (Secrets `sh.helm.release.v1.NAME.*`) are
   deleted; no object of it is deleted by this and none of its hooks runs;
4. replace the workloads whose immutable selector differs from trainstack's (upstream's controller
   Deployments select on `app.kubernetes.io/instance: NAME`): deleted right before the install
   re-creates them (the controllers restart; no CRD, TrainJob or JobSet is touched);
5. `helm install trainstack --force-conflicts` with the pinned helm and the environment's values
   (the adopted objects carry fields others applied server-side, e.g. upstream's runtime installer's
   `kubectl apply --server-side`), then wait until the controllers are Available and the golden
   runtimes exist;
6. remove what only upstream had (e.g. the runtime installer's ConfigMap and RBAC), and upstream's
   installed runtimes, only now that the golden ones exist and only when no unfinished TrainJob
   uses them (those are kept and listed).

`--dry-run` prints the plan and changes nothing. Everything is computed from the release's manifest
(`helm get manifest`), the rendered trainstack chart and what is in the cluster.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from . import api, deps, helm, paths, proc, progress, yamlio
from . import lock as lockmod
from . import render as rendermod
from .errors import UserError
from .jsontypes import dig
from .kubectl import Kubectl

TRAINSTACK_RELEASE = api.RELEASE
UPSTREAM_CHART = "kubeflow-trainer"
INSTALLER_LABEL = f"{api.TRAINER_GROUP}/managed-by"
INSTALLER_VALUE = "runtimes-installer"
KEEP = "helm.sh/resource-policy"
RELEASE_NAME = "meta.helm.sh/release-name"
RELEASE_NS = "meta.helm.sh/release-namespace"
MANAGED_BY = "app.kubernetes.io/managed-by"
PART_OF = api.PART_OF
CLUSTER_SCOPED = {"CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration",
                  "ValidatingWebhookConfiguration", "ClusterTrainingRuntime", "ValidatingAdmissionPolicy",
                  "ValidatingAdmissionPolicyBinding", "PriorityClass", "Namespace"}
TERMINAL = ("Complete", "Failed")
# Kinds whose spec.selector is immutable: when trainstack's differs (it carries the release name in
# app.kubernetes.io/instance), the object cannot be adopted in place and is re-created by the install.
WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet"}


@dataclass(frozen=True)
class Ref:
    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.namespace + '/' if self.namespace else ''}{self.name}"


@dataclass
class Action:
    step: str  # keep-crd | adopt | forget-release | replace | install | delete | keep-runtime
    target: str
    why: str


def ref_of(obj: dict[str, Any], default_ns: str) -> Ref:
    meta = obj.get("metadata") or {}
    kind = str(obj.get("kind"))
    ns = "" if kind in CLUSTER_SCOPED else str(meta.get("namespace") or default_ns)
    return Ref(kind, ns, str(meta.get("name")))


def objects(text: str) -> list[dict[str, Any]]:
    return [d for d in yamlio.load_all(text) if isinstance(d, dict) and d.get("kind")]


def unfinished_users(trainjobs: list[dict[str, Any]]) -> dict[str, list[str]]:
    """ClusterTrainingRuntime name -> unfinished TrainJobs (ns/name) that reference it."""
    users: dict[str, list[str]] = {}
    for job in trainjobs:
        ref = dig(job, "spec", "runtimeRef") or {}
        if ref.get("kind", "ClusterTrainingRuntime") != "ClusterTrainingRuntime":
            continue
        done = any(c.get("type") in TERMINAL and c.get("status") == "True"
                   for c in dig(job, "status", "conditions") or [])
        if not done:
            meta = job["metadata"]
            users.setdefault(ref.get("name", ""), []).append(f"{meta.get('namespace')}/{meta['name']}")
    return users


def plan(upstream: list[dict[str, Any]], rendered: list[dict[str, Any]], namespace: str, release: str,
         installed_runtimes: list[dict[str, Any]], trainjobs: list[dict[str, Any]]) -> list[Action]:
    """The handover, in the order it runs. `upstream`: the release's manifest objects; `rendered`: what
    trainstack installs; `installed_runtimes`: the ClusterTrainingRuntimes in the cluster."""
    ours = {ref_of(o, namespace) for o in rendered if o.get("kind") != "CustomResourceDefinition"}
    theirs = [ref_of(o, namespace) for o in upstream]
    selectors = {ref_of(o, namespace): dig(o, "spec", "selector") for o in rendered
                 if o.get("kind") in WORKLOADS}
    replaced = [ref_of(o, namespace) for o in upstream if o.get("kind") in WORKLOADS
                and ref_of(o, namespace) in selectors
                and dig(o, "spec", "selector") != selectors[ref_of(o, namespace)]]
    actions: list[Action] = []
    for ref in theirs:
        if ref.kind == "CustomResourceDefinition":
            actions.append(Action("keep-crd", str(ref), f"a template of release {release}: its uninstall would "
                                  "delete it and every object of its kind; keep it and drop the release's ownership"))
    for ref in theirs:
        if ref.kind != "CustomResourceDefinition" and ref in ours and ref not in replaced:
            actions.append(Action("adopt", str(ref), f"trainstack renders it too: hand it from release {release} "
                                  f"to {TRAINSTACK_RELEASE}"))
    golden = {r.name for r in ours if r.kind == "ClusterTrainingRuntime"}
    by_installer = [r for r in installed_runtimes
                    if dig(r["metadata"], "labels", INSTALLER_LABEL) == INSTALLER_VALUE]
    for runtime in by_installer:
        name = runtime["metadata"]["name"]
        if name in golden:
            actions.append(Action("adopt", f"ClusterTrainingRuntime/{name}", "installed by upstream's runtime "
                                  "installer; trainstack's golden runtime of the same name replaces it in place"))
    actions.append(Action("forget-release", f"release {namespace}/{release}", "delete its release records "
                          "(Secrets sh.helm.release.v1.*); no object is deleted by this"))
    for ref in replaced:
        actions.append(Action("replace", str(ref), "its selector (immutable) differs from trainstack's: deleted "
                              "right before the install re-creates it; its controller restarts, no CRD or "
                              "TrainJob is touched"))
    actions.append(Action("install", f"release {namespace}/{TRAINSTACK_RELEASE}", "CRDs server-side, then helm "
                          "install with the environment's values (taking over the fields upstream's tools applied "
                          "server-side); wait for the controllers and golden runtimes"))
    for ref in theirs:
        if ref.kind != "CustomResourceDefinition" and ref not in ours:
            actions.append(Action("delete", str(ref), f"only release {release} had it; trainstack does not use it"))
    users = unfinished_users(trainjobs)
    for runtime in by_installer:
        name = runtime["metadata"]["name"]
        if name in golden:
            continue
        if users.get(name):
            actions.append(Action("keep-runtime", f"ClusterTrainingRuntime/{name}", "upstream runtime still used by "
                                  f"unfinished TrainJobs {', '.join(users[name])}; delete it when they finish"))
        else:
            actions.append(Action("delete", f"ClusterTrainingRuntime/{name}", "installed by upstream's runtime "
                                  "installer; removed after the golden runtimes exist"))
    return actions


# -- against a cluster ------------------------------------------------------------------------------


class Migration:
    def __init__(self, release: str, namespace: str | None, env: str, kubeconfig: Path | None = None,
                 context: str | None = None, lock: lockmod.Lock | None = None) -> None:
        self.release, self.env = release, env
        self.lock = lock or lockmod.load()
        self.kubeconfig, self.context = kubeconfig, context
        self.kube = Kubectl(kubeconfig, context, self.lock)
        self.namespace = namespace or self._find_namespace()

    def helm(self, *args: str, check: bool = True, timeout: float = 600) -> proc.CompletedProcess:
        """`helm ARGS` against the cluster (list -A, get manifest)."""
        cluster = helm.Release(self.kubeconfig, self.context, lock=self.lock)
        return cluster.run(cluster.line(*args), check=check, timeout=timeout)

    def _find_namespace(self) -> str:
        found = json.loads(self.helm("list", "-A", "-o", "json").stdout or "[]")
        mine = [r for r in found if r.get("name") == self.release]
        if not mine:
            raise UserError(f"release '{self.release}' is not installed in this cluster",
                            "helm list -A shows the installed releases", exit_code=2)
        if len(mine) > 1:
            raise UserError(f"release '{self.release}' is installed in several namespaces "
                            f"({', '.join(r['namespace'] for r in mine)})", "pass --namespace", exit_code=2)
        return mine[0]["namespace"]

    def upstream_objects(self) -> list[dict[str, Any]]:
        listed = json.loads(self.helm("list", "-n", self.namespace, "-o", "json").stdout or "[]")
        entry = next((r for r in listed if r.get("name") == self.release), None)
        if entry is None:
            raise UserError(f"release '{self.release}' is not installed in namespace {self.namespace}",
                            "helm list -A shows the installed releases", exit_code=2)
        chart = str(entry.get("chart", ""))
        if not chart.startswith(UPSTREAM_CHART + "-"):
            raise UserError(f"release '{self.release}' is chart {chart}, not upstream's {UPSTREAM_CHART}",
                            "migrate from-upstream hands over a kubeflow-trainer release", exit_code=2)
        upstream = helm.Release(self.kubeconfig, self.context, self.release, self.namespace, self.lock)
        return objects(upstream.run(upstream.manifest()).stdout)

    def rendered(self) -> list[dict[str, Any]]:
        deps.ensure(self.lock)
        values = rendermod.value_args(self.env)  # the overlay's values files, in its kustomization's order
        return objects(helm.run(helm.template_args(paths.chart_dir(), *values, release=TRAINSTACK_RELEASE,
                                                   namespace=self.namespace), lock=self.lock).stdout)

    def plan(self) -> tuple[list[Action], list[dict[str, Any]]]:
        upstream = self.upstream_objects()
        rendered = self.rendered()
        runtimes = self.kube.kubectl_json("get", "clustertrainingruntimes")["items"]
        trainjobs = self.kube.kubectl_json("get", "trainjobs", "-A")["items"]
        return plan(upstream, rendered, self.namespace, self.release, runtimes, trainjobs), rendered

    def _target(self, text: str) -> list[str]:
        kind, _, rest = text.partition("/")
        ns, _, name = rest.rpartition("/")
        return [kind, name, *(["-n", ns] if ns else [])]

    def execute(self, actions: list[Action], rendered: list[dict[str, Any]], log=progress.info) -> None:
        for action in actions:
            log(f"{action.step}: {action.target}")
            if action.step == "keep-crd":
                target = self._target(action.target)
                self.kube.kubectl("annotate", "--overwrite", *target, f"{KEEP}=keep")
                self.kube.kubectl("annotate", *target, f"{RELEASE_NAME}-", f"{RELEASE_NS}-")
                self.kube.kubectl("label", *target, f"{MANAGED_BY}-")
            elif action.step == "adopt":
                target = self._target(action.target)
                self.kube.kubectl("annotate", "--overwrite", *target, f"{RELEASE_NAME}={TRAINSTACK_RELEASE}",
                                  f"{RELEASE_NS}={self.namespace}")
                self.kube.kubectl("label", "--overwrite", *target, f"{MANAGED_BY}=Helm", f"{INSTALLER_LABEL}-")
            elif action.step == "forget-release":
                self.kube.kubectl("delete", "secret", "-n", self.namespace, "-l",
                                  f"owner=helm,name={self.release}")
            elif action.step == "replace":
                self.kube.kubectl("delete", *self._target(action.target), "--ignore-not-found", "--wait=true",
                                  "--timeout=120s", timeout=150)
            elif action.step == "install":
                log(f"install: golden runtimes present: {self._install(rendered)}")
            elif action.step == "delete":
                self.kube.kubectl("delete", *self._target(action.target), "--ignore-not-found", "--wait=false")

    def _install(self, rendered: list[dict[str, Any]]) -> str:
        """CRDs server-side, helm install, then wait until the controllers are Available and every golden
        runtime exists; returns how many exist (nothing of upstream's is removed before this returns)."""
        values = rendermod.value_args(self.env)
        crds = rendermod.rendered_crds(paths.chart_dir(), values, self.namespace, self.lock)
        self.kube.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=trainstack", "-f", "-",
                          input_text=yaml.safe_dump_all(crds), timeout=180)
        # --force-conflicts: the adopted objects carry fields other managers applied server-side (upstream's
        # runtime installer applies its runtimes with `kubectl apply --server-side`); trainstack now owns them.
        release = helm.Release(self.kubeconfig, self.context, TRAINSTACK_RELEASE, self.namespace, self.lock)
        release.run(release.install(str(paths.chart_dir()), *values, "--force-conflicts", "--wait",
                                    "--timeout", "300s"), timeout=420)
        self.kube.kubectl("wait", "--for=condition=Available", "--timeout=180s", "deployment", "--all", "-n",
                          self.namespace, timeout=210)
        golden = {o["metadata"]["name"] for o in rendered if o.get("kind") == "ClusterTrainingRuntime"}
        deadline = time.monotonic() + 60
        while True:
            have = {r["metadata"]["name"] for r in self.kube.kubectl_json("get", "clustertrainingruntimes")["items"]}
            if golden <= have:
                return f"{len(golden)}"
            if time.monotonic() > deadline:
                raise UserError(f"golden runtimes missing after install: {', '.join(sorted(golden - have))}",
                                "upstream's runtimes were not removed; fix and run the migration again")
            time.sleep(1)
