"""`trainstack e2e --gitops`: the platform synced from git by the real Argo CD, on the local cluster.

What runs, all inside the cluster's network (and mount) namespace, on its loopback:
- a git daemon serving a bare repository made from this checkout (tracked and untracked-not-ignored
  files, as committed plus uncommitted), with one commit on top the way an air-gapped user writes
  theirs: the environment's values point at the cluster's image mirror, the AppProject names this
  repository;
- the chart published with `trainstack chart publish` to a second pinned distribution registry
  (TLS, a certificate from the cluster's CA), which every environment's kustomization names (the
  user's commit points releases.yaml's chartRepository at it and runs the overlays' generator);
- Argo CD at the pinned version (one binary from `trainstack tools install argocd`, symlinked as each
  component, as upstream's image does): argocd-application-controller, argocd-repo-server and
  argocd-applicationset-controller as processes, with a Redis from the pinned Debian package. The
  repo-server is unmodified: no plugin, no sidecar, no trainstack code on its PATH; its own kustomize
  (`kustomize.buildOptions: --enable-helm`) pulls the published chart. They reach the API server
  with an admin kubeconfig.

Installed the way users install it: Argo CD's CRDs and its install.yaml's configuration (ConfigMaps,
Secrets) from the pinned module, through kustomize with overlays/argocd/install as a Component (its
Deployments are not applied: their processes run here), server-side; then the cluster Secret
labelled with the environment, the repository Secret, and `kustomize build overlays/argocd`
(AppProject, ApplicationSet).

The TrainJobs from git run the golden CPU torch runtime with the `python` image (Debian and
python3, tens of megabytes) as their trainer image: what they show is Argo CD's health of a real
TrainJob, and the torch image's gigabytes (which `make e2e` trains with) would only make the node
unpack them beside Argo CD's first sync.

The checks (each a step): the ApplicationSet generates the Application for this cluster; it syncs to
Synced and Healthy from the published chart; what the repo-server rendered (read from its cache) is
object for object what `trainstack render` prints for that commit; the order of the operation's resource results follows the
sync waves; the Trainer CRDs are applied server-side; the suite's CRD, controller, runtime and
policy checks; no drift over two more reconciles; a TrainJob from git is Progressing then Healthy,
a failing one Degraded (the health Lua, live), and that commit (outside the platform's
manifest-generate-paths) does not render the platform again; a commit changing a value reaches the
cluster (and is rendered again); the ApplicationSet's Application goes with the cluster's label and
the platform stays; an Application with Argo CD's cascade finalizer takes the objects over, and
deleting it removes the release but keeps the CRDs and TrainJobs.

This module holds the checks; beside it: gitrepo (the repository), argocd (Argo CD's manifests and
processes), gitops_harness (the setup steps and reading Applications), gitops_apps (Application
status), gitops_args (what --gitops refuses). Its benchmark is trainstack.benchmarks.gitops.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from .. import api, helm, images, kubeapi, paths, proc, yamlio
from .. import generate as generatemod
from .. import render as rendermod
from ..jsontypes import dig
from . import smokejobs as smokemod
from .argocd import ARGOCD_NS, RECONCILE_S, ArgoCD
from .base import NAMESPACE, SMOKE_NS, StepFn, SuiteFailure
from .gitops_apps import healthy, op_phase, strip_tracking, summary, synced, wave
from .gitops_args import check_args
from .gitops_harness import CHART_REPO, GitOpsHarness
from .gitrepo import BRANCH, GIT_URL
from .smokejobs import SmokeJob

# what e2e/command.py and the tests reach through this module
__all__ = ["TRAINER_CRDS", "ArgoCD", "GitOpsSuite", "check_args"]

JOBS_APP = "trainstack-e2e-jobs"
JOBS_PATH = "e2e/gitops/jobs"
PUBLISHED_APP = "trainstack-published"
TRAINER_CRDS = (f"trainjobs.{api.TRAINER_GROUP}", f"trainingruntimes.{api.TRAINER_GROUP}",
                f"clustertrainingruntimes.{api.TRAINER_GROUP}")
# the value the "a git commit reaches the cluster" step changes, and where the cluster shows it
VALUE_KEY = ("policies", "params", "maxNodes")
PARAMS_CONFIGMAP = "trainstack-policy-params"


class GitOpsSuite(GitOpsHarness):
    """The gitops steps; the platform checks that apply are the Suite's own methods."""

    # -- plan ---------------------------------------------------------------------------------
    def plan(self) -> list[tuple[str, StepFn]]:
        s = self.suite
        return [
            *s.cluster_steps(", real node"),
            ("git repository served in the cluster's namespace", self.serve_git),
            ("chart published to the cluster's OCI registry", self.publish_chart),
            ("Argo CD CRDs and install component (server-side)", self.install_argocd),
            ("Argo CD components running", self.start_argocd),
            ("cluster Secret, repository, AppProject, ApplicationSet", self.register),
            ("Application Synced and Healthy (published chart, stock repo-server)", self.synced_healthy),
            ("Argo CD's render is trainstack render's", self.same_render),
            ("sync waves in order (operation result)", self.sync_waves),
            ("Trainer CRDs applied server-side", self.crds_server_side),
            *s.platform_checks(),
            ("no drift after two more reconciles", self.no_drift),
            ("TrainJob health from git: Progressing, Healthy, Degraded", self.trainjob_health),
            ("a git commit reaches the cluster", self.commit_reaches_cluster),
            ("a cascading Application takes the platform over", self.published_chart),
            ("deleting the Application keeps CRDs and TrainJobs", self.delete_application),
        ]

    def step(self, name: str, fn: StepFn) -> None:
        self.suite.step(name, fn)

    def run(self) -> None:
        self.suite.run(self.plan(), hint=f"Argo CD logs: {self.argocd.logs_dir}")

    # -- checks -------------------------------------------------------------------------------

    def synced_healthy(self) -> str:
        start = time.monotonic()
        app = self.wait_app(self.app, lambda a: synced(a) and healthy(a) and op_phase(a) == "Succeeded", 420,
                            "Synced and Healthy")
        self.revision = app["status"]["sync"]["revision"]
        # Argo CD asks the repo-server again for this commit as the sync's CRDs change the API list
        self.first_sync_renders = self.argocd.renders(self.app)
        source = app["spec"]["source"]
        if "plugin" in source:
            raise SuiteFailure(f"{self.app} renders with the plugin {source['plugin'].get('name')}")
        return (f"Synced at {self.revision[:12]}, Healthy, {len(app['status'].get('resources', []))} resources, "
                f"in {time.monotonic() - start:.0f}s; path {source.get('path')} (kustomize, the chart from "
                f"{CHART_REPO}); the repo-server rendered it {self.first_sync_renders} time(s)")

    def same_render(self) -> str:
        """What Argo CD applies (its repo-server's render of the commit, from its cache, less its own tracking
        annotation) is object for object what `trainstack render --env ENV` prints for the same commit."""
        argo = [strip_tracking(o) for o in self.argocd.cached_manifests(self.app, self.revision)]
        ours = self.git_render()
        key = rendermod.sort_key
        theirs = {key(o): o for o in argo}
        mine = {key(o): o for o in ours}
        differ = sorted(f"{k[1]}/{k[4]}" for k in theirs.keys() & mine.keys()
                        if json.dumps(theirs[k], sort_keys=True) != json.dumps(mine[k], sort_keys=True))
        only_argo = sorted(f"{k[1]}/{k[4]}" for k in theirs.keys() - mine.keys())
        only_ours = sorted(f"{k[1]}/{k[4]}" for k in mine.keys() - theirs.keys())
        self.render_diff = differ + only_argo + only_ours
        if self.render_diff:
            raise SuiteFailure(f"Argo CD's render of {self.revision[:12]} differs from trainstack render's: "
                               f"{len(differ)} objects differ ({', '.join(differ[:5])}), only Argo CD's: "
                               f"{', '.join(only_argo[:5]) or 'none'}, only trainstack's: {', '.join(only_ours[:5]) or 'none'}")
        return (f"{len(argo)} objects from the repo-server's cache at {self.revision[:12]} equal the {len(ours)} "
                f"of trainstack render --env {self.env}, field for field")

    def git_render(self) -> list[dict[str, Any]]:
        """`trainstack render --env ENV` of the served commit (its working copy), as a user runs it there."""
        work = self.git.work
        for rel in generatemod.BUILD_OUTPUTS:  # the built chart dependencies, as `trainstack deps` leaves them
            if not (work / rel).exists():
                shutil.copytree(paths.repo_root() / rel, work / rel, symlinks=True)
        env = {**os.environ, "TRAINSTACK_ROOT": str(work), "PYTHONPATH": str(paths.repo_root() / "scripts")}
        out = proc.run([sys.executable, "-m", "trainstack", "render", "--env", self.env], check=False, env=env,
                       timeout=300)
        if out.returncode != 0:
            raise SuiteFailure(f"trainstack render --env {self.env} of the served commit: {out.stderr.strip()[-300:]}")
        return [d for d in yamlio.load_all(out.stdout) if isinstance(d, dict) and d]

    def sync_waves(self) -> str:
        app = self.application()
        results = dig(app, "status", "operationState", "syncResult", "resources") or []
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
            at = dig(app, "status", "reconciledAt", default="")
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
                bundles += sum(1 for w in item.get("webhooks") or [] if dig(w, "clientConfig", "caBundle"))
        ops = app["status"].get("operationState", {}).get("operation", {}).get("sync", {}).get("revision", "")
        return (f"Synced at reconciles {', '.join(seen)}; {bundles} webhook caBundles written by the controllers, "
                f"ignored; last sync of {ops[:12] or 'the same revision'}")

    def health_runtime(self) -> dict[str, Any]:
        """The golden runtime the TrainJobs from git use: CPU torch, one pod template."""
        return next(r for r in smokemod.golden_runtimes(self.suite.rendered)
                    if "torch" in smokemod.ml_policies(r) and not smokemod.is_gpu(r) and len(smokemod.pod_specs(r)) == 1)

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

        renders = self.argocd.renders(self.app)
        commit = self.git.commit("e2e: TrainJobs from git", edit)
        project = {"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
                   "metadata": {"name": "e2e-jobs", "namespace": ARGOCD_NS},
                   "spec": {"sourceRepos": [GIT_URL], "destinations": [{"server": "*", "namespace": SMOKE_NS}],
                            "clusterResourceWhitelist": [{"group": "", "kind": "Namespace"}],
                            "namespaceResourceWhitelist": [{"group": api.TRAINER_GROUP, "kind": "TrainJob"},
                                                           {"group": api.TRAINER_GROUP, "kind": "TrainingRuntime"}]}}
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
            for res in dig(current, "status", "resources") or []:
                if res.get("kind") == "TrainJob" and res["name"] in seen:
                    state = dig(res, "health", "status", default="")
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
        app_health = dig(current["status"], "health", "status")
        # The commit touched none of the platform's manifest-generate-paths: its Application moves to
        # the new revision on Argo CD's cached manifests, without rendering the platform again.
        self.wait_app(self.app, lambda a: synced(a) and a["status"]["sync"].get("revision") == commit, 60,
                      f"Synced at {commit[:12]}")
        again = self.renders["outside"] = self.argocd.renders(self.app) - renders
        if again:
            raise SuiteFailure(f"a commit outside the platform's manifest-generate-paths rendered it {again} more "
                               f"time(s) (repo-server log: {self.argocd.logs_dir / 'argocd-repo-server.log'})")
        return (f"commit {commit[:12]}; gitops-ok {' -> '.join(seen['gitops-ok'])}; gitops-fails "
                f"{' -> '.join(seen['gitops-fails'])}; Application {JOBS_APP} {app_health}; {self.app} Synced "
                f"at {commit[:12]} without rendering again")

    def policy_param(self) -> int:
        """The value of VALUE_KEY as the cluster has it: the policies' params ConfigMap."""
        found = [c for c in self.suite.read("configmaps", NAMESPACE) if c["metadata"]["name"] == PARAMS_CONFIGMAP]
        if not found:
            raise SuiteFailure(f"no ConfigMap {PARAMS_CONFIGMAP} in {NAMESPACE}")
        return int(dig(found[0], "data", VALUE_KEY[-1], default="0"))

    def commit_reaches_cluster(self) -> str:
        """A commit of one value in the environment's values.yaml reaches the cluster. The value is a policy
        parameter (a ConfigMap): the change is seen as soon as Argo CD applied it, without a pod to start."""
        before = self.policy_param()
        wanted = before + 1

        def edit(work: Path) -> None:
            values = work / "overlays" / self.env / "values.yaml"
            data = yamlio.load(values.read_text()) or {}
            node = data
            for key in VALUE_KEY[:-1]:
                node = node.setdefault(key, {})
            node[VALUE_KEY[-1]] = wanted
            values.write_text(yaml.safe_dump(data, sort_keys=False))

        start = time.monotonic()
        renders = self.argocd.renders(self.app)
        commit = self.git.commit(f"{self.env}: {'.'.join(VALUE_KEY)}={wanted}", edit)
        # Argo CD polls git every reconcile (no webhook here): the new revision, synced
        self.wait_app(self.app, lambda a: synced(a) and a["status"]["sync"].get("revision") == commit
                      and op_phase(a) == "Succeeded" and a["status"].get("operationState", {}).get(
                          "syncResult", {}).get("revision") == commit, 300, f"Synced at {commit[:12]}")
        after = self.policy_param()
        self.value_change = (before, after)
        if after != wanted:
            raise SuiteFailure(f"ConfigMap {PARAMS_CONFIGMAP} has {VALUE_KEY[-1]}={after} after the sync, want {wanted}")
        rendered = self.renders["inside"] = self.argocd.renders(self.app) - renders
        if not rendered:  # the commit is inside overlays/<env>: the repo-server must have rendered it
            raise SuiteFailure(f"commit {commit[:12]} synced without the repo-server rendering it (log: "
                               f"{self.argocd.logs_dir / 'argocd-repo-server.log'})")
        return (f"commit {commit[:12]} ({'.'.join(VALUE_KEY)}: {before} -> {wanted}) synced in "
                f"{time.monotonic() - start:.0f}s ({rendered} render(s)); ConfigMap {PARAMS_CONFIGMAP} "
                f"{VALUE_KEY[-1]}={after}")

    def published_chart(self) -> str:
        """The ApplicationSet's Application goes with the cluster's label and the platform stays; an Application
        from the same template, with Argo CD's cascade finalizer, takes the objects over."""
        # The generated Application goes (its cluster label removed): preserveResourcesOnDeletion keeps the platform.
        self.kube.kubectl("label", "secret", "cluster-local", "-n", ARGOCD_NS, "trainstack.io/environment-")
        if not kubeapi.wait_for(self.api(), self.applications(), lambda apps: self.app not in apps, 60):
            raise SuiteFailure(f"{self.app} still there 60s after its cluster lost its label")
        left = len(self.deployments())
        if not left:
            raise SuiteFailure("removing the cluster's label deleted the platform's Deployments")
        appset = next(d for d in yamlio.load_all(helm.run(["build", str(self.git.work / "overlays" / "argocd")],
                                                             lock=self.lock, binary="kustomize").stdout)
                      if isinstance(d, dict) and d.get("kind") == "ApplicationSet")
        spec = copy.deepcopy(appset["spec"]["template"]["spec"])
        spec["source"] = {"repoURL": GIT_URL, "targetRevision": BRANCH, "path": f"overlays/{self.env}"}
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
                   if not (dig(d["metadata"], "annotations", "argocd.argoproj.io/tracking-id", default="")
                           .startswith(f"{PUBLISHED_APP}:"))]
        if tracked:
            raise SuiteFailure(f"Deployments not taken over by {PUBLISHED_APP}: {', '.join(tracked)}")
        return (f"{PUBLISHED_APP} (overlays/{self.env}: {CHART_REPO}/trainstack {self.chart_version} + overlays/base, "
                f"cascade finalizer): Synced and Healthy in {time.monotonic() - start:.0f}s, "
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
