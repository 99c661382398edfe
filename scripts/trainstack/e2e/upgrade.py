"""Upgrade N-1 -> N and faults survived, driven over a kubeconfig of an already-started cluster.

`trainstack e2e --upgrade-from VERSION|REF` is: bring a cluster up (any provider), then
`UpgradeTest(...).run()`. It

1. exports the tree of the old release's commit (or any git ref) with `git archive` into a
   temporary folder (the checkout is not touched) and builds that tree's chart dependencies
   with that tree's own tooling, the way a user of that release did;
2. installs that chart with the pinned helm, creates TrainJobs and waits until some finished;
3. creates more TrainJobs held across the upgrade (`suspend: true`, their JobSets made by the old
   controllers; resumed after it: on KWOK nodes pods complete at once), starts a webhook probe (a server-side
   dry-run TrainJob create in a loop) and upgrades to the working tree: first the CRDs with
   server-side apply (Helm never upgrades `crds/`: the documented step), then `helm upgrade`;
4. checks that nothing is lost: every TrainJob, JobSet and runtime is still there, finished
   TrainJobs keep their status, running ones end Complete, the CRDs carry the new schema, no
   field-manager conflict was reported, and the longest window of rejected creates;
5. `helm rollback` to the old revision and checks the platform answers again;
6. the same with the helm v3 line (`helm3`), from a fresh install of the old release (on the same
   cluster after an uninstall; `trainstack e2e` gives the local provider a fresh cluster instead).

Fault survival (e2e/faults.py) uses the same snapshots and TrainJob helpers. Providers that run
the controllers outside the cluster (the local provider's host processes) pass `prepare` / `adapt`
/ `after_uninstall` callbacks: `LocalAdapter` (localadapter.py), wired by `for_suite`.

Here: the test itself (its steps and their record). The old tree is oldrelease.py, the snapshots
and the webhook probe clusterstate.py, the CRDs of a chart render.py.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from .. import helm, kubeapi, paths, proc, progress, yamlio
from .. import lock as lockmod
from .. import render as rendermod
from ..api import TRAINER_API
from ..errors import UserError
from ..jsontypes import dig
from ..kubectl import Kubectl
from ..render import rendered_crds
from .base import GROUP, NAMESPACE, PART_OF, RELEASE
from .clusterstate import WebhookProbe, conflicts, losses, rejection, snapshot, terminal
from .localadapter import LocalAdapter
from .oldrelease import build_old_chart, export_ref
from .smokejobs import required_labels

JOBS_NS = "trainstack-upgrade"
LABEL = "trainstack.io/e2e"


# -- the test ----------------------------------------------------------------------------------------


@dataclass
class Row:
    step: str
    result: str
    seconds: float
    detail: str = ""


@dataclass
class UpgradeTest:
    """Upgrade from `from_ref` to the working tree on the cluster behind `kubeconfig`."""

    kubeconfig: Path
    from_ref: str
    env: str = "dev"
    run_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="trainstack-upgrade-")))
    lock: lockmod.Lock | None = None
    root: Path = field(default_factory=paths.repo_root)
    context: str | None = None
    # Called right after each helm install/upgrade/rollback starts, while helm applies and waits
    # (e.g. the local provider re-pointing webhooks at its host controllers, as it does on install):
    # adapt(binary, verb, the running helm process).
    adapt: Callable[[str, str, proc.Popen], None] | None = None
    # Called right before each helm command starts: prepare(binary, verb).
    prepare: Callable[[str, str], None] | None = None
    finished_jobs: int = 2
    running_jobs: int = 2
    job_timeout: float = 300
    rows: list[Row] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    labels: dict[str, str] | None = None  # what the policies require on TrainJobs (job_labels)
    # Called after `helm uninstall` (e.g. the local provider stopping its host controllers).
    after_uninstall: Callable[[], None] | None = None

    def __post_init__(self) -> None:
        self.lock = self.lock or lockmod.load()
        self.kube = Kubectl(self.kubeconfig, self.context, self.lock)

    # -- plumbing ---------------------------------------------------------------------------------
    def record(self, step: str, fn: Callable[[], str]) -> str:
        start = time.monotonic()
        try:
            detail = fn() or ""
        except UserError as err:
            self.rows.append(Row(step, "FAIL", time.monotonic() - start, err.message))
            raise
        self.rows.append(Row(step, "pass", time.monotonic() - start, detail))
        return detail

    def release(self, binary: str) -> helm.Release:
        """The release on this cluster, driven by BINARY (helm, or helm3)."""
        return helm.Release(self.kubeconfig, self.context, RELEASE, NAMESPACE, self.lock, binary)

    def helm(self, release: helm.Release, cmd: list[str], timeout: float = 600) -> proc.CompletedProcess:
        """Run CMD, a command line of RELEASE, its output in a log of the run; prepare and adapt around it."""
        binary, verb = release.binary, cmd[1]
        log = self.run_dir / f"{binary}-{verb}-{int(time.time() * 1000)}.log"
        if self.prepare is not None:
            self.prepare(binary, verb)
        with log.open("w") as sink:  # a file, not a pipe: helm never blocks on output while adapt runs
            sink.write("$ " + " ".join(cmd) + "\n")
            sink.flush()
            process = release.start(cmd, sink)
            try:
                if self.adapt is not None and verb in ("install", "upgrade", "rollback"):
                    self.adapt(binary, verb, process)
                process.wait(timeout=timeout)
            except BaseException:
                process.kill()
                process.wait()
                raise
        out = log.read_text().split("\n", 1)[1]
        if process.returncode != 0:
            raise UserError(f"{binary} {verb} failed: {helm.first_error_line(out)}", f"log: {log}")
        return proc.CompletedProcess(cmd, process.returncode, out, "")

    def values(self, tree: Path) -> list[str]:
        """helm -f for the environment's values files in that tree, as its kustomization lists them
        (none when the tree has no such overlay: an older release may predate the environment)."""
        if not (tree / "overlays" / self.env / "kustomization.yaml").is_file():
            return []
        return rendermod.value_args(self.env, root=tree)

    def api(self) -> Any:
        """The kubernetes client for the reads, watches and waits (the user's commands stay kubectl/helm)."""
        return kubeapi.for_kube(self.kube)

    def torch_runtime(self) -> str:
        key, value = PART_OF
        api = self.api()
        items = kubeapi.items(api, kubeapi.resource(api, "clustertrainingruntimes"), label_selector=f"{key}={value}")
        fits = [r for r in items if "torch" in (dig(r, "spec", "mlPolicy") or {})
                and dig(r["metadata"], "labels", "trainstack.io/accelerator", default="cpu") == "cpu"
                and len(r["spec"]["template"]["spec"]["replicatedJobs"]) == 1]
        if not fits:
            raise UserError("the installed platform has no CPU torch golden runtime to run TrainJobs on")
        return min(r["metadata"]["name"] for r in fits)

    def job_labels(self) -> dict[str, str]:
        """Labels the new chart's bound policies require on TrainJobs (as the smoke suite sets them)."""
        if self.labels is None:
            objects = [d for d in yamlio.load_all(helm.run(
                helm.template_args(paths.chart_dir(), *self.values(self.root)), lock=self.lock).stdout)
                if isinstance(d, dict)]
            self.labels = required_labels(objects)
        return dict(self.labels)

    def trainjob(self, name: str, runtime: str, seconds: int = 1, suspend: bool = False) -> dict[str, Any]:
        job: dict[str, Any] = {
            "apiVersion": TRAINER_API, "kind": "TrainJob",
            "metadata": {"name": name, "namespace": JOBS_NS, "labels": {LABEL: "upgrade", **self.job_labels()}},
            "spec": {"runtimeRef": {"name": runtime, "kind": "ClusterTrainingRuntime", "apiGroup": GROUP},
                     "trainer": {"numNodes": 1, "command": ["python", "-c", f"import time; time.sleep({seconds})"]}},
        }
        if suspend:
            job["spec"]["suspend"] = True
        return job

    def resume(self, names: list[str]) -> None:
        """Let held (suspended) TrainJobs run: their JobSets exist and were kept across the upgrade or fault."""
        for name in names:
            self.kube.kubectl("patch", "trainjob", name, "-n", JOBS_NS, "--type=merge",
                              "-p", '{"spec":{"suspend":false}}')

    def wait_terminal(self, names: list[str], timeout: float) -> dict[str, str]:
        """Until each TrainJob NAMES is Complete or Failed (watching); their end states."""
        api = self.api()
        items: dict[str, str] = {}
        for objects in kubeapi.snapshots(api, kubeapi.resource(api, "trainjobs", JOBS_NS), timeout=timeout):
            items = {name: terminal(t)[0] for name, t in objects.items()}
            if all(items.get(n) for n in names):
                return {n: items[n] for n in names}
        late = [n for n in names if not items.get(n)]
        raise UserError(f"TrainJobs not finished within {timeout:.0f}s: {', '.join(late)}")

    # -- steps ------------------------------------------------------------------------------------
    def install_old(self, binary: str, old_chart: Path, old_root: Path) -> str:
        release = self.release(binary)
        self.helm(release, release.install(str(old_chart), "--create-namespace", *self.values(old_root),
                                           "--wait", "--timeout", "300s"))
        self.kube.kubectl("create", "namespace", JOBS_NS, check=False)
        self.wait_admitted(f"{binary} install", 90)
        self.old_runtimes = snapshot(self.kube).runtimes
        return f"{binary} install {old_chart}: {len(self.old_runtimes)} runtimes"

    def wait_admitted(self, after: str, timeout: float) -> float:
        """Until a TrainJob create (server dry run) is admitted: webhooks answer, policies and their params are
        loaded by the API server. Returns the seconds it took."""
        probe = self.trainjob("admission-probe", self.torch_runtime())
        start = time.monotonic()
        while True:
            error = rejection(self.kube, probe)
            if not error:
                return time.monotonic() - start
            if time.monotonic() - start > timeout:
                raise UserError(f"after {after} a TrainJob create is still rejected: {error}")
            time.sleep(0.5)

    def start_jobs(self, prefix: str, count: int, seconds: int, suspend: bool = False) -> list[str]:
        runtime = self.torch_runtime()
        names = [f"{prefix}-{i}" for i in range(count)]
        self.kube.kubectl("create", "-f", "-", input_text=yaml.safe_dump_all(
            [self.trainjob(n, runtime, seconds, suspend) for n in names]))
        return names

    def wait_jobsets(self, names: list[str], timeout: float = 60) -> None:
        """Until each TrainJob has its JobSet (the Trainer controller reconciled it)."""
        api = self.api()
        have: set[str] = set()
        for objects in kubeapi.snapshots(api, kubeapi.resource(api, "jobsets", JOBS_NS), timeout=timeout):
            have = set(objects)
            if set(names) <= have:
                return
        raise UserError(f"no JobSet within {timeout:.0f}s for: {', '.join(sorted(set(names) - have))}")

    def apply_crds(self, chart_dir: Path) -> str:
        """The documented CRD step: server-side apply of every CRD the new chart installs with these values."""
        docs = rendered_crds(chart_dir, self.values(self.root), lock=self.lock)
        if not docs:
            raise UserError(f"{chart_dir}: no CRDs found (run 'trainstack deps')")
        text = yaml.safe_dump_all(docs)
        first = self.kube.kubectl("apply", "--server-side", "--field-manager=trainstack", "-f", "-",
                                  input_text=text, check=False, timeout=180)
        found = conflicts(first.stderr)
        if first.returncode != 0:
            # CRDs installed from a chart's crds/ are owned by helm's manager; take them over, say so.
            self.kube.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=trainstack", "-f", "-",
                              input_text=text, timeout=180)
        self.figures.setdefault("crd_conflicts", []).extend(found)
        names = [d["metadata"]["name"] for d in docs]
        self.kube.kubectl("wait", "--for=condition=Established", "--timeout=60s", *[f"crd/{n}" for n in names],
                          timeout=90)
        stale = [d["metadata"]["name"] for d in docs if not self._schema_matches(d)]
        if stale:
            raise UserError(f"CRDs not at the new schema after server-side apply: {', '.join(stale)}")
        return f"{len(docs)} CRDs applied server-side" + (f" (took over {len(found)} field(s) from helm)" if found else "")

    def reset_crds(self, old_chart: Path, old_root: Path) -> str:
        docs = rendered_crds(old_chart, self.values(old_root), lock=self.lock)
        self.kube.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=trainstack", "-f", "-",
                          input_text=yaml.safe_dump_all(docs), timeout=180)
        return f"{len(docs)} CRDs of the old chart applied server-side"

    def _schema_matches(self, doc: dict[str, Any]) -> bool:
        api = self.api()
        live = kubeapi.named(api, kubeapi.resource(api, "customresourcedefinitions"), doc["metadata"]["name"])
        if live is None:
            return False
        want = {v["name"]: v.get("schema") for v in doc["spec"]["versions"]}
        have = {v["name"]: v.get("schema") for v in live["spec"]["versions"]}
        return all(json.dumps(have.get(k), sort_keys=True) == json.dumps(v, sort_keys=True) for k, v in want.items())

    def upgrade(self, binary: str) -> str:
        chart = paths.chart_dir()
        before = snapshot(self.kube)
        probe_job = self.trainjob("webhook-probe", self.torch_runtime())
        start = time.monotonic()
        with WebhookProbe(self.kube, probe_job) as probe:
            crd_note = self.apply_crds(chart)
            release = self.release(binary)
            out = self.helm(release, release.upgrade(str(chart), *self.values(self.root),
                                                     "--wait", "--timeout", "300s")).stdout
            self.kube.kubectl("wait", "--for=condition=Available", "--timeout=120s", "deployment", "--all",
                              "-n", NAMESPACE, timeout=150)
            time.sleep(2)  # a few admitted samples after the rollout
        seconds = time.monotonic() - start
        found = conflicts(out)
        after = snapshot(self.kube)
        problems = losses(before, after)
        if found:
            problems.append(f"field-manager conflicts reported by {binary} upgrade: {'; '.join(found[:3])}")
        self.figures[f"{binary}_upgrade_seconds"] = round(seconds, 1)
        self.figures[f"{binary}_webhook_gap_seconds"] = round(probe.gap, 2)
        self.figures[f"{binary}_rejected_creates"] = f"{probe.rejected}/{len(probe.samples)}"
        if problems:
            raise UserError(f"{binary} upgrade: " + "; ".join(problems))
        return (f"{seconds:.1f}s; {crd_note}; longest window of rejected TrainJob creates {probe.gap:.2f}s "
                f"({probe.rejected} of {len(probe.samples)} probes rejected"
                + (f", last: {probe.last_error}" if probe.rejected else "") + ")")

    def finished_summary(self, names: list[str]) -> str:
        return f"{len(names)} {sorted(set(self.wait_terminal(names, self.job_timeout).values()))}"

    def resume_and_finish(self, names: list[str]) -> str:
        self.resume(names)
        return self.running_finish(names)

    def running_finish(self, names: list[str]) -> str:
        states = self.wait_terminal(names, self.job_timeout)
        bad = {n: s for n, s in states.items() if s != "Complete"}
        if bad:
            raise UserError(f"TrainJobs running during the upgrade did not end Complete: {bad}")
        return f"{len(names)} TrainJobs started before the upgrade ended Complete"

    def rollback(self, binary: str) -> str:
        release = self.release(binary)
        history = json.loads(self.helm(release, release.history()).stdout or "[]")
        if len(history) < 2:
            raise UserError(f"helm history of {RELEASE} has {len(history)} revision(s); nothing to roll back to")
        target = str(history[-2]["revision"])
        before = snapshot(self.kube)
        self.helm(release, release.rollback(target, "--wait", "--timeout", "300s"))
        self.kube.kubectl("wait", "--for=condition=Available", "--timeout=120s", "deployment", "--all",
                          "-n", NAMESPACE, timeout=150)
        self.wait_admitted(f"{binary} rollback", 60)
        after = snapshot(self.kube)
        # the runtimes the newer release added go with the rollback; every runtime N-1 had must be back
        added = before.runtimes - getattr(self, "old_runtimes", before.runtimes)
        problems = losses(before, after, expect_gone=added)
        back: set[str] = getattr(self, "old_runtimes", set()) - after.runtimes
        if back:
            problems.append(f"runtimes of the old release missing after the rollback: {', '.join(sorted(back))}")
        names = self.start_jobs(f"after-rollback-{binary}", 1, 1)
        states = self.wait_terminal(names, self.job_timeout)
        if states[names[0]] != "Complete":
            problems.append(f"a TrainJob created after the rollback ended {states[names[0]]}")
        if problems:
            raise UserError(f"{binary} rollback: " + "; ".join(problems))
        return (f"rolled back to revision {target}; webhooks admit; a new TrainJob completed"
                + (f"; removed with N: {', '.join(sorted(r.rsplit('/', 1)[-1] for r in added))}" if added else ""))

    def uninstall(self, binary: str) -> str:
        release = self.release(binary)
        self.helm(release, release.uninstall("--wait", "--timeout", "180s"))
        if self.after_uninstall is not None:
            self.after_uninstall()
        self.kube.kubectl("delete", "trainjobs", "--all", "-n", JOBS_NS, "--wait=true", "--timeout=120s",
                          check=False, timeout=150)
        return "release removed for the next helm line (CRDs stay)"

    def run(self, binaries: tuple[str, ...] = ("helm", "helm3")) -> list[Row]:
        with tempfile.TemporaryDirectory(prefix="trainstack-old-") as tmp:
            old_root = Path(tmp)
            commit, label = "", ""

            def export() -> str:
                nonlocal commit, label
                commit, label = export_ref(self.root, self.from_ref, old_root)
                return f"{label}: git archive {commit[:12]} -> {old_root}"

            self.record(f"export {self.from_ref}", export)
            old_chart = old_root / "charts" / "trainstack"
            self.record("build the old chart's dependencies (its own tooling)", lambda: str(build_old_chart(old_root)))
            for i, binary in enumerate(binaries):
                if i:
                    self.record(f"{binaries[i - 1]}: uninstall before the {binary} run",
                                partial(self.uninstall, binaries[i - 1]))
                    self.record(f"CRDs back to {label} (so the {binary} run upgrades them again)",
                                partial(self.reset_crds, old_chart, old_root))
                self.record(f"{binary}: install {label}", partial(self.install_old, binary, old_chart, old_root))
                done = self.start_jobs(f"done-{binary}", self.finished_jobs, 1)
                self.record(f"{binary}: TrainJobs finished before the upgrade", partial(self.finished_summary, done))
                # Held TrainJobs: created before the upgrade, their JobSets made by the old release's controller,
                # suspended across the upgrade and resumed after it (on KWOK nodes pods complete at once, so a
                # TrainJob cannot be caught mid-run there; on a real node these run).
                running = self.start_jobs(f"running-{binary}", self.running_jobs, 30, suspend=True)
                self.wait_jobsets(running)
                self.record(f"{binary}: CRDs server-side, then upgrade to the working tree", partial(self.upgrade, binary))
                self.record(f"{binary}: TrainJobs held across the upgrade resume and end Complete",
                            partial(self.resume_and_finish, running))
                self.record(f"{binary}: rollback to {label}", partial(self.rollback, binary))
        return self.rows


def report(test: UpgradeTest, failure: UserError | None = None) -> dict[str, Any]:
    """Print the step table and the figures; the same as data (for TRAINSTACK_E2E_SUMMARY / bench)."""
    progress.table(f"trainstack e2e --upgrade-from {test.from_ref}", ["step", "result", "seconds", "detail"],
                   [(r.step, r.result, f"{r.seconds:.1f}", r.detail[:140]) for r in test.rows])
    for key, value in sorted(test.figures.items()):
        progress.info(f"{key}: {value}")
    return {"from": test.from_ref, "passed": failure is None, "failure": failure.message if failure else "",
            "figures": test.figures,
            "steps": [{"step": r.step, "result": r.result, "seconds": round(r.seconds, 1), "detail": r.detail}
                      for r in test.rows]}


def for_suite(suite: Any, from_ref: str, run_dir: Path, **kwargs: Any) -> UpgradeTest:
    """An UpgradeTest on the cluster a Suite brought up (render + cluster steps done, nothing installed)."""
    provider = suite.provider
    kubeconfig = Path(getattr(suite.kube, "kubeconfig", None) or provider.kubeconfig)
    test = UpgradeTest(kubeconfig, from_ref, env=suite.env, run_dir=run_dir, lock=suite.lock,
                       labels=dict(suite.job_labels), **kwargs)
    if provider.name == "local":
        adapter = LocalAdapter(provider, suite)
        test.adapt, test.after_uninstall, test.prepare = adapter.adapt, adapter.after_uninstall, adapter.prepare
        test.adapter = adapter  # type: ignore[attr-defined]
    return test
