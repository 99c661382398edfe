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
/ `after_uninstall` callbacks: `LocalAdapter` below, wired by `for_suite`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .. import helm, kubeapi, paths, release, tools
from .. import lock as lockmod
from ..errors import UserError, output_line

RELEASE = "trainstack"
NAMESPACE = "kubeflow-system"
JOBS_NS = "trainstack-upgrade"
GROUP = "trainer.kubeflow.org"
PART_OF = ("app.kubernetes.io/part-of", "trainstack")
LABEL = "trainstack.io/e2e"
TERMINAL = ("Complete", "Failed")
WEBHOOK_KINDS = ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")


# -- the old tree ---------------------------------------------------------------------------------


def export_ref(root: Path, version_or_ref: str, dest: Path) -> tuple[str, str]:
    """Write the tree of a release version or git ref into dest (git archive; the checkout is untouched)."""
    commit, label = release.resolve(root, version_or_ref)
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(root), "archive", "--format=tar", commit], capture_output=True,
                             timeout=120, check=False)
    if archive.returncode != 0:
        raise UserError(f"git archive {commit[:12]} failed: {archive.stderr.decode(errors='replace').strip()}")
    with tempfile.TemporaryFile() as tmp:
        tmp.write(archive.stdout)
        tmp.seek(0)
        with tarfile.open(fileobj=tmp) as tar:
            tar.extractall(dest, filter="tar")
    if not (dest / "charts" / "trainstack" / "Chart.yaml").is_file():
        raise UserError(f"{label} has no charts/trainstack/Chart.yaml: not a trainstack release", exit_code=2)
    return commit, label


def build_old_chart(old_root: Path, python: str = sys.executable, timeout: float = 900) -> Path:
    """Build the old tree's chart dependencies with the old tree's own tooling and lock (same tool cache)."""
    env = {**os.environ, "TRAINSTACK_ROOT": str(old_root), "PYTHONPATH": str(old_root / "scripts")}
    env.pop("TRAINSTACK_LOCK", None)
    result = subprocess.run([python, "-m", "trainstack", "deps"], cwd=old_root, env=env, capture_output=True,
                            text=True, timeout=timeout, check=False)
    if result.returncode != 0:
        said = output_line(result.stderr or result.stdout, markers=())
        raise UserError(f"building the old chart's dependencies failed: {said}")
    return old_root / "charts" / "trainstack"


def rendered_crds(chart_dir: Path, value_args: list[str], namespace: str = NAMESPACE,
                  lock: lockmod.Lock | None = None) -> list[dict[str, Any]]:
    """The CRDs `helm install` of this chart with these values installs (its crds/ and those of the enabled
    dependencies): `helm template --include-crds`, CRDs only."""
    text = helm.run(["template", RELEASE, str(chart_dir), "--namespace", namespace, "--include-crds", *value_args],
                    lock=lock).stdout
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return [d for d in yaml.load_all(text, Loader=loader)
            if isinstance(d, dict) and d.get("kind") == "CustomResourceDefinition"]


def crd_documents(chart_dir: Path) -> list[dict[str, Any]]:
    """Every CRD a chart ships: its crds/ folder and the crds/ of each dependency archive in charts/."""
    docs: list[dict[str, Any]] = []
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    for path in sorted((chart_dir / "crds").glob("*.yaml")):
        docs += [d for d in yaml.load_all(path.read_text(), Loader=loader) if isinstance(d, dict) and d]
    for archive in sorted((chart_dir / "charts").glob("*.tgz")):
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                parts = member.name.split("/")
                if member.isfile() and "crds" in parts[:-1] and member.name.endswith((".yaml", ".yml")):
                    text = tar.extractfile(member).read().decode()
                    docs += [d for d in yaml.load_all(text, Loader=loader) if isinstance(d, dict) and d]
    return [d for d in docs if d.get("kind") == "CustomResourceDefinition"]


# -- what is in the cluster -------------------------------------------------------------------------


@dataclass
class Snapshot:
    trainjobs: dict[str, tuple[str, str]]  # ns/name -> (terminal condition type or '', its lastTransitionTime)
    jobsets: set[str]
    runtimes: set[str]  # kind/ns/name
    crd_versions: dict[str, str]  # CRD name -> resourceVersion


def terminal(obj: dict[str, Any]) -> tuple[str, str]:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") in TERMINAL and cond.get("status") == "True":
            return cond["type"], str(cond.get("lastTransitionTime", ""))
    return "", ""


def _key(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{meta.get('namespace', '')}/{meta['name']}"


def snapshot(kube: Any) -> Snapshot:
    api = kubeapi.for_kube(kube)

    def listed(plural: str) -> list[dict[str, Any]]:
        return kubeapi.items(api, kubeapi.resource(api, plural))

    trainjobs = {_key(t): terminal(t) for t in listed("trainjobs")}
    jobsets = {_key(j) for j in listed("jobsets")}
    runtimes = {f"ClusterTrainingRuntime/{_key(r)}" for r in listed("clustertrainingruntimes")}
    runtimes |= {f"TrainingRuntime/{_key(r)}" for r in listed("trainingruntimes")}
    crds = {c["metadata"]["name"]: c["metadata"].get("resourceVersion", "") for c in listed("customresourcedefinitions")}
    return Snapshot(trainjobs, jobsets, runtimes, crds)


def losses(before: Snapshot, after: Snapshot, expect_gone: set[str] = frozenset()) -> list[str]:
    """What the upgrade (or fault) lost or changed that users rely on, as sentences."""
    problems = []
    gone = sorted(set(before.trainjobs) - set(after.trainjobs) - expect_gone)
    if gone:
        problems.append(f"TrainJobs lost: {', '.join(gone)}")
    changed = sorted(k for k, (state, at) in before.trainjobs.items()
                     if state and k in after.trainjobs and after.trainjobs[k] != (state, at))
    if changed:
        problems.append("finished TrainJobs changed status: " + ", ".join(
            f"{k} ({before.trainjobs[k][0]} -> {after.trainjobs[k][0] or 'not finished'})" for k in changed))
    lost_sets = sorted(before.jobsets - after.jobsets)
    if lost_sets:
        problems.append(f"JobSets lost: {', '.join(lost_sets)}")
    lost_runtimes = sorted(before.runtimes - after.runtimes - expect_gone)
    if lost_runtimes:
        problems.append(f"runtimes lost: {', '.join(lost_runtimes)}")
    return problems


def longest_gap(samples: list[tuple[float, bool]]) -> float:
    """Longest time between the first rejected create of a run of rejections and the next admitted one."""
    worst, start = 0.0, None
    for at, ok in samples:
        if not ok and start is None:
            start = at
        elif ok and start is not None:
            worst, start = max(worst, at - start), None
    if start is not None and samples:
        worst = max(worst, samples[-1][0] - start)
    return worst


def conflicts(helm_output: str) -> list[str]:
    """Field-manager conflicts helm reported (server-side apply), one line each."""
    return [ln.strip() for ln in helm_output.splitlines() if "conflict" in ln.lower()]


class WebhookProbe:
    """A TrainJob create (server-side dry run: webhooks and policies, nothing stored) in a loop."""

    def __init__(self, kube: Any, trainjob: dict[str, Any], interval: float = 0.2) -> None:
        self.kube, self.text, self.interval = kube, yaml.safe_dump(trainjob), interval
        self.samples: list[tuple[float, bool]] = []
        self.last_error = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            result = self.kube.kubectl("create", "--dry-run=server", "-f", "-", input_text=self.text, check=False,
                                       timeout=30)
            self.samples.append((time.monotonic(), result.returncode == 0))
            if result.returncode:
                self.last_error = (result.stderr.strip().splitlines() or [""])[-1][:300]
            self._stop.wait(self.interval)

    def __enter__(self) -> WebhookProbe:  # noqa: PYI034
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    @property
    def rejected(self) -> int:
        return sum(1 for _, ok in self.samples if not ok)

    @property
    def gap(self) -> float:
        return longest_gap(self.samples)


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
    adapt: Callable[[str, str, subprocess.Popen], None] | None = None
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
        from .kube import Kubectl

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

    def helm(self, binary: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        cmd = [str(tools.require(binary, self.lock)), *args, "--kubeconfig", str(self.kubeconfig),
               *(["--kube-context", self.context] if self.context else [])]
        log = self.run_dir / f"{binary}-{args[0]}-{int(time.time() * 1000)}.log"
        if self.prepare is not None:
            self.prepare(binary, args[0])
        with log.open("w") as sink:  # a file, not a pipe: helm never blocks on output while adapt runs
            sink.write("$ " + " ".join(cmd) + "\n")
            sink.flush()
            proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=helm.env(self.lock))
            try:
                if self.adapt is not None and args[0] in ("install", "upgrade", "rollback"):
                    self.adapt(binary, args[0], proc)
                proc.wait(timeout=timeout)
            except BaseException:
                proc.kill()
                proc.wait()
                raise
        out = log.read_text().split("\n", 1)[1]
        if proc.returncode != 0:
            raise UserError(f"{binary} {args[0]} failed: {helm.first_error_line(out)}", f"log: {log}")
        return subprocess.CompletedProcess(cmd, proc.returncode, out, "")

    def values(self, tree: Path) -> list[str]:
        """helm -f for the environment's values files in that tree, as its kustomization lists them
        (none when the tree has no such overlay: an older release may predate the environment)."""
        from .. import render as rendermod

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
        fits = [r for r in items if "torch" in ((r.get("spec") or {}).get("mlPolicy") or {})
                and (r["metadata"].get("labels") or {}).get("trainstack.io/accelerator", "cpu") == "cpu"
                and len(r["spec"]["template"]["spec"]["replicatedJobs"]) == 1]
        if not fits:
            raise UserError("the installed platform has no CPU torch golden runtime to run TrainJobs on")
        return min(r["metadata"]["name"] for r in fits)

    def job_labels(self) -> dict[str, str]:
        """Labels the new chart's bound policies require on TrainJobs (as the smoke suite sets them)."""
        if self.labels is None:
            from . import suite

            objects = [d for d in yaml.safe_load_all(helm.run(
                ["template", RELEASE, str(paths.chart_dir()), "--namespace", NAMESPACE, *self.values(self.root)],
                lock=self.lock).stdout) if isinstance(d, dict)]
            self.labels = suite.required_labels(objects)
        return dict(self.labels)

    def trainjob(self, name: str, runtime: str, seconds: int = 1, suspend: bool = False) -> dict[str, Any]:
        job = {
            "apiVersion": f"{GROUP}/v1alpha1", "kind": "TrainJob",
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
        self.helm(binary, "install", RELEASE, str(old_chart), "-n", NAMESPACE, "--create-namespace",
                  *self.values(old_root), "--wait", "--timeout", "300s")
        self.kube.kubectl("create", "namespace", JOBS_NS, check=False)
        self.wait_admitted(f"{binary} install", 90)
        self.old_runtimes = snapshot(self.kube).runtimes
        return f"{binary} install {old_chart}: {len(self.old_runtimes)} runtimes"

    def wait_admitted(self, after: str, timeout: float) -> float:
        """Until a TrainJob create (server dry run) is admitted: webhooks answer, policies and their params are
        loaded by the API server. Returns the seconds it took."""
        probe = yaml.safe_dump(self.trainjob("admission-probe", self.torch_runtime()))
        start = time.monotonic()
        while True:
            result = self.kube.kubectl("create", "--dry-run=server", "-f", "-", input_text=probe, check=False)
            if result.returncode == 0:
                return time.monotonic() - start
            if time.monotonic() - start > timeout:
                raise UserError(f"after {after} a TrainJob create is still rejected: {result.stderr.strip()[-300:]}")
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
            out = self.helm(binary, "upgrade", RELEASE, str(chart), "-n", NAMESPACE, *self.values(self.root),
                            "--wait", "--timeout", "300s").stdout
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

    def running_finish(self, names: list[str]) -> str:
        states = self.wait_terminal(names, self.job_timeout)
        bad = {n: s for n, s in states.items() if s != "Complete"}
        if bad:
            raise UserError(f"TrainJobs running during the upgrade did not end Complete: {bad}")
        return f"{len(names)} TrainJobs started before the upgrade ended Complete"

    def rollback(self, binary: str) -> str:
        history = json.loads(self.helm(binary, "history", RELEASE, "-n", NAMESPACE, "-o", "json").stdout or "[]")
        if len(history) < 2:
            raise UserError(f"helm history of {RELEASE} has {len(history)} revision(s); nothing to roll back to")
        target = str(history[-2]["revision"])
        before = snapshot(self.kube)
        self.helm(binary, "rollback", RELEASE, target, "-n", NAMESPACE, "--wait", "--timeout", "300s")
        self.kube.kubectl("wait", "--for=condition=Available", "--timeout=120s", "deployment", "--all",
                          "-n", NAMESPACE, timeout=150)
        probe = self.trainjob("rollback-probe", self.torch_runtime())
        deadline = time.monotonic() + 60
        while True:
            result = self.kube.kubectl("create", "--dry-run=server", "-f", "-", input_text=yaml.safe_dump(probe),
                                       check=False)
            if result.returncode == 0:
                break
            if time.monotonic() > deadline:
                raise UserError(f"after {binary} rollback the webhooks reject a TrainJob: {result.stderr.strip()[-300:]}")
            time.sleep(0.5)
        after = snapshot(self.kube)
        # the runtimes the newer release added go with the rollback; every runtime N-1 had must be back
        added = before.runtimes - getattr(self, "old_runtimes", before.runtimes)
        problems = losses(before, after, expect_gone=added)
        back = getattr(self, "old_runtimes", set()) - after.runtimes
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
        self.helm(binary, "uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "180s")
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
                                lambda b=binaries[i - 1]: self.uninstall(b))
                    self.record(f"CRDs back to {label} (so the {binary} run upgrades them again)",
                                lambda: self.reset_crds(old_chart, old_root))
                self.record(f"{binary}: install {label}", lambda b=binary: self.install_old(b, old_chart, old_root))
                done = self.start_jobs(f"done-{binary}", self.finished_jobs, 1)
                self.record(f"{binary}: TrainJobs finished before the upgrade",
                            lambda d=done: f"{len(d)} {sorted(set(self.wait_terminal(d, self.job_timeout).values()))}")
                # Held TrainJobs: created before the upgrade, their JobSets made by the old release's controller,
                # suspended across the upgrade and resumed after it (on KWOK nodes pods complete at once, so a
                # TrainJob cannot be caught mid-run there; on a real node these run).
                running = self.start_jobs(f"running-{binary}", self.running_jobs, 30, suspend=True)
                self.wait_jobsets(running)
                self.record(f"{binary}: CRDs server-side, then upgrade to the working tree",
                            lambda b=binary: self.upgrade(b))
                self.record(f"{binary}: TrainJobs held across the upgrade resume and end Complete",
                            lambda r=running: (self.resume(r), self.running_finish(r))[1])
                self.record(f"{binary}: rollback to {label}", lambda b=binary: self.rollback(b))
        return self.rows


def report(test: UpgradeTest, failure: UserError | None = None) -> dict[str, Any]:
    """Print the step table and the figures; the same as data (for TRAINSTACK_E2E_SUMMARY / bench)."""
    from .. import progress

    progress.table(f"trainstack e2e --upgrade-from {test.from_ref}", ["step", "result", "seconds", "detail"],
                   [(r.step, r.result, f"{r.seconds:.1f}", r.detail[:140]) for r in test.rows])
    for key, value in sorted(test.figures.items()):
        progress.info(f"{key}: {value}")
    return {"from": test.from_ref, "passed": failure is None, "failure": failure.message if failure else "",
            "figures": test.figures,
            "steps": [{"step": r.step, "result": r.result, "seconds": round(r.seconds, 1), "detail": r.detail}
                      for r in test.rows]}


# -- the local provider's host controllers through helm install/upgrade/rollback -------------------


class LocalAdapter:
    """Keeps the local provider's host-process controllers reachable while helm changes the release.

    On KWOK nodes the chart's controllers run as local processes, and their webhook Services and
    configurations are re-pointed at them after install (the provider's `while_installing`). `helm
    upgrade` and `helm rollback` put the chart's Service and webhook client config back; this
    re-points them as soon as helm has written them, while helm waits. The webhook gap measured
    on KWOK therefore includes this re-pointing (on a real node the controllers are pods and
    nothing is re-pointed)."""

    def __init__(self, provider: Any, suite: Any) -> None:
        self.provider, self.suite = provider, suite
        self.repointed = 0

    def adapt(self, binary: str, verb: str, proc: subprocess.Popen) -> None:
        if getattr(self.provider, "real", False):
            return
        if verb == "install" or self.provider.controllers is None:
            self.provider.while_installing(self.suite, proc)
            return
        # helm writes the Services and webhook configurations while it runs: watch them and re-point on a
        # change (the first list of each watch counts as one); the 0.2s tick only looks at helm's process
        api = kubeapi.for_kube(self.provider.cluster)
        deadline = time.monotonic() + 600
        with kubeapi.Changes(600) as changes:
            from kubernetes import client as k8s

            changes.watch("services", api, k8s.CoreV1Api(api).list_namespaced_service, namespace=NAMESPACE)
            for kind in WEBHOOK_KINDS:
                changes.watch(kind, api, kubeapi.resource(api, kind))
            while proc.poll() is None and time.monotonic() < deadline:
                if changes.changed(0.2) and self.diverged():
                    self.provider.controllers.point_webhooks_here()
                    self.repointed += 1
        if self.diverged():
            self.provider.controllers.point_webhooks_here()
            self.repointed += 1

    def prepare(self, binary: str, verb: str) -> None:
        """Before helm upgrade/rollback: drop the field ownership of the local re-pointing (manager
        kubectl-patch) on the chart's Services and webhook configurations, so helm (server-side apply in
        v4) takes its fields back as on a cluster where nobody re-pointed them. Without this, helm v4
        reports a conflict on Service .spec.type that only the local adaptation causes."""
        if verb not in ("upgrade", "rollback") or getattr(self.provider, "real", False) or not self.provider.controllers:
            return
        cluster = self.provider.cluster
        names = [n for ctl in self.provider.controllers.controllers for n in ctl.services]
        targets = [("service", n, NAMESPACE) for n in names]
        for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
            targets += [(kind, c["metadata"]["name"], "") for c in cluster.kubectl_json("get", kind)["items"]]
        for kind, name, ns in targets:
            ns_args = ["-n", ns] if ns else []
            obj = cluster.kubectl_json("get", kind, name, *ns_args, "--show-managed-fields")
            managed = obj["metadata"].get("managedFields") or []
            kept = [m for m in managed if m.get("manager") != "kubectl-patch"]
            if len(kept) != len(managed):
                cluster.kubectl("patch", kind, name, *ns_args, "--type=merge",
                                "-p", json.dumps({"metadata": {"managedFields": kept or [{}]}}))

    def diverged(self) -> bool:
        from kubernetes import client as k8s
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        ctls = self.provider.controllers
        cluster = self.provider.cluster
        api = kubeapi.for_kube(cluster)
        try:
            services = {s["metadata"]["name"]: s for s in kubeapi.items(
                api, k8s.CoreV1Api(api).list_namespaced_service, namespace=NAMESPACE)}
            configs = [c for kind in WEBHOOK_KINDS for c in kubeapi.items(api, kubeapi.resource(api, kind))]
        except (ApiException, HTTPError):  # the API server busy or away: look again on the next change
            return False
        ports = {name: ctl.webhook_port for ctl in ctls.controllers for name in ctl.services}
        if any((services.get(n, {}).get("spec") or {}).get("type") != "ExternalName" for n in ports):
            return True
        bundle = cluster.ca_bundle()
        for config in configs:
            for hook in config.get("webhooks") or []:
                client = hook.get("clientConfig") or {}
                ref = client.get("service") or {}
                if ref.get("namespace") == NAMESPACE and ref.get("name") in ports and (
                        ref.get("port") != ports[ref["name"]] or client.get("caBundle") != bundle):
                    return True
        return False

    def after_uninstall(self) -> None:
        if getattr(self.provider, "real", False):
            return
        self.provider.after_uninstall(self.suite)
        self.provider.controllers = None


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
