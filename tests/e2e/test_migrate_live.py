"""`trainstack migrate from-upstream`, live: a local cluster (KWOK nodes, the controllers as host
processes) runs upstream's kubeflow-trainer chart 2.3.0, installed the way users install it, and is
handed over to trainstack with TrainJobs finished and one held across the migration.

Upstream's chart is the pinned archive `trainstack deps` builds from upstream's verified source
(charts/trainstack/charts/kubeflow-trainer-2.3.0.tgz). It is installed with `helm install` and its
defaults, plus the values a user sets to get built-in runtimes (torch-distributed, and
torch-distributed-with-cache with data cache on and LWS already present) and the installer Job's
tolerations/nodeSelector (upstream values) so that it is scheduled on a KWOK node. Its post-install
hook Job runs there as KWOK runs any Job pod: it succeeds without a container running. What its
container would have done (`apk add kubectl` cannot run here: no network, no image) the test does
with the pinned kubectl, the same commands on the same manifest: `kubectl apply --server-side
--force-conflicts -f runtimes.yaml` of the installer ConfigMap's runtimes.yaml, then `kubectl label
--overwrite -f runtimes.yaml trainer.kubeflow.org/managed-by=runtimes-installer`.

One cluster for the module; the tests run in file order.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from trainstack import helm, migrate, paths
from trainstack.cluster.local import BINARIES
from trainstack.e2e import base as basemod
from trainstack.e2e import clusterstate, upgrade
from trainstack.e2e import suite as suitemod
from trainstack.e2e.providers.local import SIMULATED_TAINT, LocalProvider
from trainstack.jsontypes import dig

from .conftest import fresh_run_dir, need_binaries

BESIDE_REAL_NODES = True  # KWOK clusters and local processes only (tests/e2e/conftest.py)

pytestmark = pytest.mark.e2e
ROOT = paths.repo_root()
NS = basemod.NAMESPACE
RELEASE = "kubeflow-trainer"
JOBS = upgrade.JOBS_NS
UPSTREAM_RUNTIMES = ("torch-distributed", "torch-distributed-with-cache")
# What a user sets on upstream's chart to get built-in runtimes, and where its installer Job may run.
UPSTREAM_SETS = [
    "runtimes.torchDistributed.enabled=true",
    "dataCache.enabled=true", "dataCache.lws.install=false",
    "dataCache.runtimes.torchDistributedWithCache.enabled=true",
    "runtimes.installer.nodeSelector.type=kwok",
]
TOLERATION = {"key": SIMULATED_TAINT["key"], "operator": "Exists"}
UPSTREAM_JSON = [f"runtimes.installer.tolerations=[{json.dumps(TOLERATION)}]"]
# What the dry run must leave as it is and the migration must not delete.
WATCHED = [("crds", None), ("clustertrainingruntimes", None), ("trainjobs", JOBS), ("jobsets", JOBS),
           ("deployments", NS), ("services", NS), ("configmaps", NS), ("serviceaccounts", NS),
           ("mutatingwebhookconfigurations", None), ("validatingwebhookconfigurations", None),
           ("clusterroles", None), ("clusterrolebindings", None)]


def upstream_archive() -> Path:
    found = sorted((ROOT / "charts/trainstack/charts").glob("kubeflow-trainer-*.tgz"))
    assert found, "upstream's chart is not built: run 'trainstack deps'"
    return found[0]


class Live:
    def __init__(self) -> None:
        need_binaries(*BINARIES, "helm", "kubectl")
        self.run_dir = fresh_run_dir("migrate")
        self.provider = LocalProvider(self.run_dir, nodes="kwok")
        self.suite = suitemod.Suite(self.provider, "dev", self.run_dir)
        self.up = True
        for name, fn in self.suite.cluster_steps():  # nothing installed
            self.suite.step(name, fn)
        self.test = upgrade.for_suite(self.suite, f"upstream {upstream_archive().name}", self.run_dir)
        self.kube = self.test.kube
        self.kubeconfig = self.test.kubeconfig
        self.figures: dict[str, object] = {}

    def down(self) -> None:
        if self.up:
            self.up = False
            self.provider.down(keep=False)
            shutil.rmtree(self.run_dir, ignore_errors=True)

    def helm(self, *args: str) -> subprocess.CompletedProcess:
        cluster = helm.Release(self.kubeconfig, lock=self.suite.lock)
        return cluster.run(cluster.line(*args))

    def install_upstream(self) -> None:
        """`helm install` of upstream's chart (the controllers started as host processes once helm created
        them); then what the runtime installer hook's container does."""
        sets = [a for s in UPSTREAM_SETS for a in ("--set", s)] + [a for s in UPSTREAM_JSON for a in ("--set-json", s)]
        upstream = helm.Release(self.kubeconfig, name=RELEASE, namespace=NS, lock=self.suite.lock)
        cmd = upstream.install(str(upstream_archive()), "--create-namespace", *sets, "--wait", "--timeout", "300s")
        log = self.run_dir / "helm-install-upstream.log"
        with log.open("w") as sink:
            proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=helm.env(self.suite.lock))
            try:
                self.provider.while_installing(self.suite, proc)
                proc.wait(timeout=420)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        assert proc.returncode == 0, log.read_text()[-2000:]
        cm = self.kube.kubectl_json("get", "configmap", "-n", NS, "-l",
                                    "app.kubernetes.io/component=runtimes-installer")["items"]
        if not cm:  # the installer's ConfigMap, found by its data key
            cm = [c for c in self.kube.kubectl_json("get", "configmaps", "-n", NS)["items"]
                  if "runtimes.yaml" in (c.get("data") or {})]
        assert len(cm) == 1, [c["metadata"]["name"] for c in cm]
        manifest = self.run_dir / "runtimes.yaml"
        manifest.write_text(cm[0]["data"]["runtimes.yaml"])
        self.kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(manifest))
        self.kube.kubectl("label", "--overwrite", "-f", str(manifest),
                          f"{migrate.INSTALLER_LABEL}={migrate.INSTALLER_VALUE}")

    def state(self) -> dict[str, dict]:
        """(kind, ns, name) -> uid, labels, annotations, spec: what a change of the cluster would change."""
        out: dict[str, dict] = {}
        for kind, ns in WATCHED:
            items = self.kube.kubectl_json("get", kind, *(["-n", ns] if ns else []))["items"]
            for obj in items:
                meta = obj["metadata"]
                out[f"{kind}/{meta.get('namespace', '')}/{meta['name']}"] = {
                    "uid": meta["uid"], "labels": meta.get("labels") or {},
                    "annotations": {k: v for k, v in (meta.get("annotations") or {}).items()
                                    if k != "kubectl.kubernetes.io/last-applied-configuration"},
                    "spec": obj.get("spec"), "webhooks": obj.get("webhooks"), "data": obj.get("data")}
        releases = json.loads(self.helm("list", "-A", "-o", "json").stdout or "[]")
        out["helm releases"] = {"names": sorted(f"{r['namespace']}/{r['name']}/{r['revision']}" for r in releases)}
        return out

    def follow(self, proc: subprocess.Popen) -> None:
        """While the migration runs: the local provider's part, as on any install. When the install has
        re-created the controller Deployments (the `replace` step), the host processes of upstream's are
        stopped and the new Deployments' started (their ConfigMaps, ServiceAccounts, webhooks: trainstack's
        now), as a kubelet would start the new pods; then their webhooks are kept pointed at them."""
        old = {d["metadata"]["name"]: d["metadata"]["uid"]
               for d in self.kube.kubectl_json("get", "deployments", "-n", NS)["items"]}
        replaced = {a["target"].rsplit("/", 1)[-1] for a in self.plan["actions"] if a["step"] == "replace"}
        deadline = time.monotonic() + 600
        while proc.poll() is None and time.monotonic() < deadline:
            now = {d["metadata"]["name"]: d["metadata"]["uid"]
                   for d in self.kube.kubectl_json("get", "deployments", "-n", NS)["items"]}
            if all(n in now and now[n] != old.get(n) for n in replaced):
                break
            time.sleep(0.3)
        if proc.poll() is not None:
            return
        self.provider.after_uninstall(self.suite)
        self.provider.controllers = None
        self.provider.while_installing(self.suite, proc)
        self.test.adapter.adapt("helm", "upgrade", proc)

    def get(self, target: str) -> dict:
        kind, _, rest = target.partition("/")
        ns, _, name = rest.rpartition("/")
        return self.kube.kubectl_json("get", kind, name, *(["-n", ns] if ns else []))

    def cli(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "trainstack", "migrate", "from-upstream", *args,
                               "--kubeconfig", str(self.kubeconfig)], capture_output=True, text=True,
                              timeout=timeout)


@pytest.fixture(scope="module")
def live():
    # a cluster of its own: upstream's chart installed, then migrated (the platform replaced)
    start = time.monotonic()
    env = Live()
    try:
        env.install_upstream()
        env.figures["upstream_install_seconds"] = round(time.monotonic() - start, 1)
        test = env.test
        env.kube.kubectl("create", "namespace", JOBS)
        done = [f"upstream-done-{i}" for i in range(2)]
        env.kube.kubectl("create", "-f", "-", input_text=yaml.safe_dump_all(
            [test.trainjob(n, "torch-distributed") for n in done]))
        env.done = done
        assert set(test.wait_terminal(done, 120).values()) == {"Complete"}
        env.held = ["upstream-held"]
        env.kube.kubectl("create", "-f", "-", input_text=yaml.safe_dump(
            test.trainjob(env.held[0], "torch-distributed", 30, suspend=True)))
        test.wait_jobsets(env.held)
        yield env
    finally:
        env.down()


def test_unknown_release_is_one_line_and_changes_nothing(live):
    before = live.state()
    result = live.cli("--release", "no-such-release")
    assert result.returncode == 2, result
    lines = [ln for ln in result.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "no-such-release" in lines[0] and "Traceback" not in result.stderr, result.stderr
    assert live.state() == before


def test_dry_run_prints_the_plan_and_changes_nothing(live):
    before = live.state()
    result = live.cli("--release", RELEASE, "--dry-run", "--output", "json")
    assert result.returncode == 0, result.stderr[-2000:]
    plan = json.loads(result.stdout)
    assert plan["dry_run"] and plan["namespace"] == NS
    steps = [(a["step"], a["target"]) for a in plan["actions"]]
    assert {t for s, t in steps if s == "keep-crd"} == {
        f"CustomResourceDefinition/{n}.trainer.kubeflow.org" for n in
        ("clustertrainingruntimes", "trainingruntimes", "trainjobs")}
    assert ("adopt", "ClusterTrainingRuntime/torch-distributed") in steps
    assert ("adopt", f"Service/{NS}/kubeflow-trainer-controller-manager") in steps
    # the Deployments' selectors carry the release name (immutable): re-created, right before the install
    assert ("replace", f"Deployment/{NS}/kubeflow-trainer-controller-manager") in steps
    assert ("delete", "ClusterTrainingRuntime/torch-distributed-with-cache") in steps
    # what only upstream's release had: the runtime installer's ConfigMap, the LWS its data cache pulled in
    assert ("delete", f"ConfigMap/{NS}/kubeflow-trainer-runtimes-installer") in steps
    assert ("delete", f"Deployment/{NS}/kubeflow-trainer-lws-controller-manager") in steps
    order = [s for s, _ in steps]
    assert order.index("forget-release") < order.index("replace") < order.index("install") < order.index("delete")
    text = live.cli("--release", RELEASE, "--dry-run")  # the same plan, as a table for people
    assert text.returncode == 0 and "dry run: nothing changed" in text.stdout, text.stderr[-2000:]
    assert all(step in text.stdout for step in ("keep-crd", "adopt", "forget-release", "replace", "install"))
    assert live.state() == before
    live.plan = plan


def test_migration_keeps_crds_and_trainjobs_and_hands_over(live):
    before = live.state()
    crd_uids = {k: v["uid"] for k, v in before.items() if k.startswith("crds/")}
    trainjobs_before = {t["metadata"]["name"]: t
                        for t in live.kube.kubectl_json("get", "trainjobs", "-n", JOBS)["items"]}
    live.adopted = {a["target"]: live.get(a["target"])["metadata"]["uid"]
                    for a in live.plan["actions"] if a["step"] == "adopt"}
    out, err = live.run_dir / "migrate.out", live.run_dir / "migrate.err"
    start = time.monotonic()
    # TrainJob creates (server-side dry run, on upstream's runtime) in a loop across the handover
    probe = clusterstate.WebhookProbe(live.kube, live.test.trainjob("webhook-probe", "torch-distributed"))
    with out.open("w") as so, err.open("w") as se, probe:
        proc = subprocess.Popen([sys.executable, "-m", "trainstack", "migrate", "from-upstream", "--release", RELEASE,
                                 "--kubeconfig", str(live.kubeconfig), "--output", "json"],
                                stdout=so, stderr=se, stdin=subprocess.DEVNULL)
        try:
            live.follow(proc)
            proc.wait(timeout=600)
            live.test.wait_admitted("the migration", 60)
            time.sleep(1)  # admitted probes after the handover
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    live.figures["migrate_seconds"] = round(time.monotonic() - start, 1)
    live.figures["webhook_gap_seconds"] = round(probe.gap, 2)
    live.figures["rejected_creates"] = f"{probe.rejected}/{len(probe.samples)}"
    live.figures["last_rejection"] = probe.last_error
    assert probe.samples and probe.samples[-1][1], probe.last_error  # creates are admitted again after it
    assert proc.returncode == 0, err.read_text()[-3000:]
    log = [ln.strip() for ln in err.read_text().splitlines()]

    after = live.state()
    # No CRD deleted or re-created; Helm's keep annotation, no release owns them.
    assert {k: v["uid"] for k, v in after.items() if k.startswith("crds/") and k in crd_uids} == crd_uids
    for key in crd_uids:
        if "trainer.kubeflow.org" in key:
            annotations = after[key]["annotations"]
            assert annotations.get(migrate.KEEP) == "keep", key
            assert migrate.RELEASE_NAME not in annotations, key
    # No TrainJob lost; finished ones keep their status.
    now = {t["metadata"]["name"]: t for t in live.kube.kubectl_json("get", "trainjobs", "-n", JOBS)["items"]}
    assert set(trainjobs_before) <= set(now)
    for name in live.done:
        assert now[name]["metadata"]["uid"] == trainjobs_before[name]["metadata"]["uid"]
        assert clusterstate.terminal(now[name]) == clusterstate.terminal(trainjobs_before[name]) != ("", "")
    # The trainstack release owns what it took over; upstream's release is gone.
    releases = {r["name"]: r for r in json.loads(live.helm("list", "-A", "-o", "json").stdout)}
    assert RELEASE not in releases and releases["trainstack"]["status"] == "deployed", releases
    manifest = {(o["kind"], o["metadata"]["name"]) for o in migrate.objects(
        live.helm("get", "manifest", "trainstack", "-n", NS).stdout)}
    assert live.adopted
    for target, uid in live.adopted.items():
        kind, name = target.split("/")[0], target.rsplit("/", 1)[-1]
        meta = live.get(target)["metadata"]
        assert meta["uid"] == uid, f"{target} was re-created"
        assert dig(meta, "annotations", migrate.RELEASE_NAME) == "trainstack", target
        assert dig(meta, "annotations", migrate.RELEASE_NS) == NS, target
        assert dig(meta, "labels", migrate.MANAGED_BY) == "Helm", target
        assert (kind, name) in manifest, target
    # Upstream's installed runtimes: adopted in place or removed, removed only after the golden ones existed.
    golden = {r["metadata"]["name"] for r in live.kube.kubectl_json(
        "get", "clustertrainingruntimes", "-l", "=".join(basemod.PART_OF))["items"]}
    assert "torch-distributed" in golden
    assert "clustertrainingruntimes//torch-distributed-with-cache" not in after
    installed = next(i for i, ln in enumerate(log) if ln.startswith("install: golden runtimes present"))
    removed = next(i for i, ln in enumerate(log) if ln == "delete: ClusterTrainingRuntime/torch-distributed-with-cache")
    assert installed < removed, log
    assert not [k for k in after if k.startswith("clustertrainingruntimes/") and
                (after[k]["labels"].get(migrate.INSTALLER_LABEL) == migrate.INSTALLER_VALUE)]
    lost = sorted(k for k in before if k not in after and not k.startswith("clustertrainingruntimes/")
                  and k != "helm releases")
    planned = {a["target"].rsplit("/", 1)[-1] for a in live.plan["actions"] if a["step"] == "delete"}
    assert all(k.rsplit("/", 1)[-1] in planned for k in lost), f"deleted without a plan entry: {lost}"


def test_held_trainjob_completes_and_the_platform_works_after(live):
    test = live.test
    test.resume(live.held)
    assert test.wait_terminal(live.held, 180) == {live.held[0]: "Complete"}
    test.wait_admitted("the migration", 90)
    names = test.start_jobs("after-migration", 1, 1)  # on a golden runtime, with the labels its policies need
    assert test.wait_terminal(names, 180) == {names[0]: "Complete"}
    job = live.kube.kubectl_json("get", "trainjob", names[0], "-n", JOBS)
    runtime = job["spec"]["runtimeRef"]["name"]
    labels = live.kube.kubectl_json("get", "clustertrainingruntime", runtime)["metadata"]["labels"]
    assert labels.get(basemod.PART_OF[0]) == basemod.PART_OF[1]
    print(json.dumps(live.figures))
