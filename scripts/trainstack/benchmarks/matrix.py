"""`trainstack bench matrix` (`make test-matrix`): the chart on every Kubernetes release it claims.

For each release the lock tests (kubernetes.version and kubernetes.matrix; docs/support.md), in a
process of its own with TRAINSTACK_KUBERNETES set to it, so every lock read sees that release:

- build: kube-apiserver, kube-controller-manager, kube-scheduler and kubectl of that release from
  k8s.io/kubernetes, into the tool cache like every pinned tool (a warm run skips it);
- validate: every environment's render (`helm template --kube-version` of that release, so the chart's
  kubeVersion is checked) and the examples, against that release's built-in schemas;
- e2e: `trainstack e2e --provider local --nodes kwok` on that release's control plane: helm install,
  the policies enforced by that API server, the smoke TrainJobs Complete, a failing one Failed, uninstall;
- upgrade: `trainstack e2e --upgrade-from N-1 --helm helm` on it: TrainJobs in flight survive the
  upgrade to the working tree and the rollback;
- kube-upgrade: `trainstack e2e --kube-upgrade-to NEXT` (e2e/kubeupgrade.py): the platform installed and
  TrainJobs done on that release, then its control plane replaced by the next tested release's, process by
  process on the same etcd; the platform, its TrainJobs and its policies checked on the new one (not for
  the newest release);
- real: that release's kubelet and kube-proxy (built on first use, like the control plane) on the
  local cluster's real nodes with containerd: the controllers as pods, the torch TrainJobs on real
  pods (`trainstack e2e --nodes real`). Needs `make setup` (the node's Debian packages, the images).

A failing part does not stop the others: bench/results/matrix.json has every release x part with its
result, seconds and, for a failure, the line that says why. Not part of `make test` (tens of minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .. import lock as lockmod
from .. import paths, proc, progress, release, tools
from ..errors import UsageError, output_line
from ..jsontypes import dig

PARTS = ("build", "validate", "e2e", "upgrade", "kube-upgrade", "real")
ENVIRONMENTS = ("dev", "staging", "prod", "cpu-only")
# Examples every release must accept (examples/policies holds deliberately denied objects; examples/teams is
# values files).
EXAMPLES = ("examples/trainjobs",)
TIMEOUT_S = {"build": 3600, "validate": 900, "e2e": 1800, "upgrade": 1800, "kube-upgrade": 1800, "real": 3600}


def releases(lock: lockmod.Lock, wanted: str | None) -> list[str]:
    """The tested releases, oldest first; or those of WANTED (comma-separated X.Y or vX.Y.Z)."""
    tested = lock.kubernetes_matrix()
    if not wanted:
        return tested
    out: list[str] = []
    for item in (w.strip() for w in wanted.split(",") if w.strip()):
        found = lock.kubernetes_release(item)
        if found is None:
            raise UsageError(f"--kube-versions: {item} is not tested (tested: {', '.join(tested)})",
                             "add it to kubernetes.matrix in trainstack.lock.yaml")
        if found not in out:
            out.append(found)
    return out


def commands(part: str, version: str, previous: str, following: str | None = None) -> list[list[str]]:
    """The trainstack command lines PART runs for VERSION (TRAINSTACK_KUBERNETES carries the release); FOLLOWING
    is the next tested release (kube-upgrade: none for the newest, which has nothing to run)."""
    ts = [sys.executable, "-m", "trainstack"]
    if part == "kube-upgrade":
        return [[*ts, "e2e", "--provider", "local", "--nodes", "kwok", "--kube-upgrade-to", following]] if following else []
    if part == "build":
        return [[*ts, "tools", "install", "kubernetes"]]
    if part == "validate":
        envs = [arg for env in ENVIRONMENTS for arg in ("--env", env)]
        return [[*ts, "validate", *envs, *EXAMPLES]]
    if part == "e2e":
        return [[*ts, "e2e", "--provider", "local", "--nodes", "kwok", "--env", "dev"]]
    if part == "upgrade":
        return [[*ts, "e2e", "--provider", "local", "--nodes", "kwok", "--upgrade-from", previous, "--helm", "helm"]]
    if part == "real":  # that release's kubelet and kube-proxy (built on first use) on the real nodes
        return [[*ts, "tools", "install", "kubernetes-node"],
                [*ts, "e2e", "--provider", "local", "--nodes", "real", "--env", "dev"]]
    raise ValueError(part)


def run_part(part: str, version: str, previous: str, logs: Path, following: str | None = None) -> dict[str, Any]:
    """One part on one release: passed, seconds, why (a failure's line), and the e2e's steps."""
    argvs = commands(part, version, previous, following)
    if not argvs:
        return {"passed": True, "skipped": f"nothing to run on {version} (the newest tested release)", "seconds": 0.0}
    env = dict(os.environ, **{lockmod.KUBERNETES_ENV: version})
    log = logs / f"{version}-{part}.log"
    log.write_text("")
    start = time.monotonic()
    out: dict[str, Any] = {"passed": True}
    with tempfile.TemporaryDirectory() as tmp:
        summary = Path(tmp) / "summary.json"
        env["TRAINSTACK_E2E_SUMMARY"] = str(summary)
        for argv in argvs:
            with log.open("a") as sink:
                sink.write(f"$ {lockmod.KUBERNETES_ENV}={version} {' '.join(argv[1:])}\n")
                sink.flush()
                result = proc.run(argv, check=False, cwd=paths.repo_root(), env=env, stdout=sink,
                                  stderr=proc.STDOUT, timeout=TIMEOUT_S[part])
            if result.returncode != 0:
                out = {"passed": False, "exit": result.returncode,
                       "why": output_line(log.read_text(), markers=("error", "FAIL"), empty=f"exit {result.returncode}")}
                break
        if summary.is_file():
            data = json.loads(summary.read_text())
            out["steps"] = [{k: s.get(k) for k in ("step", "result", "seconds")} for s in data.get("steps", [])]
            served = served_release(data, version)
            out.update(served if out["passed"] else {k: v for k, v in served.items() if k == "served"})
    out["seconds"] = round(time.monotonic() - start, 1)
    out["log"] = str(log.relative_to(paths.repo_root()))
    return out


def served_release(summary: dict[str, Any], version: str) -> dict[str, Any]:
    """What API server (and real nodes' kubelets) the e2e ran on, from its cluster step: a run on another release
    than VERSION fails the part, so a matrix row never reports the pinned release's result as another's."""
    cluster = [s["data"] for s in summary.get("steps", []) if dig(s, "data", "serverVersion")]
    if not cluster:
        return {"passed": False, "why": "the e2e summary names no API server version (its cluster never came up)"}
    served, kubelets = cluster[0]["serverVersion"], cluster[0].get("kubeletVersions") or []
    out: dict[str, Any] = {"served": served, **({"kubelets": kubelets} if kubelets else {})}
    if served != version:
        return {**out, "passed": False, "why": f"ran on Kubernetes {served}, not {version}"}
    if [k for k in kubelets if k != version]:
        return {**out, "passed": False, "why": f"real nodes ran kubelet {', '.join(kubelets)}, not {version}"}
    return out


def build_seconds(lock: lockmod.Lock, tool: str) -> float | None:
    """How long this release's build of TOOL (kubernetes: the control plane; kubernetes-node) took, as the
    tool cache recorded it (None: not built here, or reused from PATH)."""
    try:
        stamp = json.loads((tools.tool_dir(lock.tool(tool)) / tools.STAMP).read_text())
    except (OSError, ValueError):
        return None
    seconds = stamp.get("seconds")
    return round(float(seconds), 1) if isinstance(seconds, int | float) and stamp.get("source") == "go build" else None


def table(results: list[dict[str, Any]], parts: tuple[str, ...], lock: lockmod.Lock, commit: str = "") -> str:
    """bench/results/matrix.md: release x part, pass or FAIL with seconds, and the build times; the commit the
    cells ran at (COMMIT, the latest run's, unless a cell names another)."""
    def cell(entry: dict[str, Any] | None) -> str:
        if not entry:
            return "not run"
        if entry.get("skipped"):
            return "n/a"
        return f"{'pass' if entry['passed'] else '**FAIL**'} ({entry['seconds']:.0f} s)"

    def built(seconds: float | None) -> str:
        return "-" if seconds is None else f"{seconds:.0f} s"

    lines = [
        "# The Kubernetes matrix",
        "",
        (f"Written by `make test-matrix` (`trainstack bench matrix`){f' at {commit}' if commit else ''}; chart kubeVersion "
         f"`{lock.kubernetes_constraint}`."),
        "What each part runs: docs/support.md. Build: the release's control plane (and, for `real`, kubelet and",
        "kube-proxy) from k8s.io/kubernetes, as the tool cache recorded it when it was built.",
        "",
        f"| release | {' | '.join(parts)} | build | node build |",
        f"|---|{'---|' * len(parts)}---|---|",
    ]
    for row in results:
        cells = [cell(row["parts"].get(part)) for part in parts]
        name = row["version"] + (" (make test's)" if row.get("pinned") else "")
        lines.append(f"| {name} | {' | '.join(cells)} | {built(row.get('build_seconds'))} | "
                     f"{built(row.get('node_build_seconds'))} |")
    groups: dict[str, list[str]] = {}
    for row in results:
        for part, entry in row["parts"].items():
            groups.setdefault(entry.get("commit") or commit, []).append(f"{row['version']} {part}")
    if len(groups) > 1:  # cells kept from earlier runs: which commit each ran at (the largest group: "the rest")
        largest = max(groups, key=lambda at: len(groups[at]))
        lines += ["", "The cells ran at more than one commit:", ""]
        lines += [f"- {at}: {', '.join(cells)}" for at, cells in groups.items() if at != largest]
        lines += [f"- {largest}: every other cell"]
    failures = [(row["version"], part, entry.get("why", "")) for row in results
                for part, entry in row["parts"].items() if not entry["passed"]]
    if failures:
        lines += ["", "Failures:", ""] + [f"- {version} {part}: {why}" for version, part, why in failures]
    return "\n".join(lines) + "\n"


def summarize(results: list[dict[str, Any]], parts: tuple[str, ...]) -> tuple[str, list[str]]:
    """(one summary line, the failures as 'vX.Y.Z part' strings)."""
    failed = [f"{r['version']} {p}" for r in results for p in parts if p in r["parts"] and not r["parts"][p]["passed"]]
    passed = sum(1 for r in results if all(r["parts"].get(p, {}).get("passed") for p in parts))
    line = f"{passed} of {len(results)} Kubernetes releases passed {', '.join(parts)}"
    return (line + (f"; failed: {', '.join(failed)}" if failed else "")), failed


def run(args: argparse.Namespace) -> dict[str, Any]:
    lock = lockmod.load()
    versions = releases(lock, getattr(args, "kube_versions", None))
    parts = tuple(p.strip() for p in (getattr(args, "matrix_parts", None) or ",".join(PARTS)).split(",") if p.strip())
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        raise UsageError(f"--matrix-parts: unknown {', '.join(unknown)} (known: {', '.join(PARTS)})")
    previous = release.previous()
    root = paths.repo_root()
    head = proc.output(["git", "-C", str(root), "rev-parse", "HEAD"]).strip()
    dirty = bool(proc.output(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"]).strip())
    logs = paths.repo_root() / "artifacts" / "matrix"
    logs.mkdir(parents=True, exist_ok=True)
    commit = head + (" with uncommitted changes" if dirty else "")
    out_dir = Path(getattr(args, "results_dir", None) or paths.repo_root() / "bench" / "results")
    rows = earlier_rows(out_dir / "matrix.json", lock)
    tested = lock.kubernetes_matrix()
    for version in versions:
        later = tested[tested.index(version) + 1:]
        row = rows.setdefault(version, {"version": version, "parts": {}})
        row.update({"minor": lockmod.minor_of(version), "pinned": version == lock.kubernetes_version})
        for part in parts:
            with progress.step(f"Kubernetes {version}: {part}"):
                row["parts"][part] = {**run_part(part, version, previous, logs, later[0] if later else None),
                                      "commit": commit}
        row["build_seconds"] = build_seconds(lock.for_kubernetes(version), "kubernetes")
        row["node_build_seconds"] = build_seconds(lock.for_kubernetes(version), "kubernetes-node")
    results = [rows[v] for v in tested if v in rows]
    shown = tuple(p for p in PARTS if any(p in r["parts"] for r in results))
    summary, failed = summarize(results, shown)
    progress.table("trainstack matrix", ["release", *shown, "build (s)"],
                   [(r["version"], *(cell_word(r["parts"].get(p)) for p in shown),
                     "-" if r.get("build_seconds") is None else f"{r['build_seconds']:.0f}") for r in results])
    oldest, newest = lock.kubernetes_supported
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "matrix.md").write_text(table(results, shown, lock, commit))
    return {"summary": summary, "failed": failed, "supported": {"oldest": oldest, "newest": newest},
            "kubeVersion": lock.kubernetes_constraint, "upgrade_from": previous, "parts": list(shown),
            "commit": head, "uncommitted_changes": dirty, "releases": results}


def cell_word(entry: dict[str, Any] | None) -> str:
    if not entry:
        return "not run"
    return "n/a" if entry.get("skipped") else ("pass" if entry["passed"] else "FAIL")


def earlier_rows(path: Path, lock: lockmod.Lock) -> dict[str, dict[str, Any]]:
    """The rows of an earlier matrix.json, by release, for releases still tested: a run of some releases or parts
    replaces those cells and keeps the others (each cell names the commit it ran at)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    tested = set(lock.kubernetes_matrix())
    rows = {row["version"]: row for row in data.get("releases", [])
            if isinstance(row, dict) and row.get("version") in tested and isinstance(row.get("parts"), dict)}
    ran_at = str(data.get("commit", "")) + (" with uncommitted changes" if data.get("uncommitted_changes") else "")
    for row in rows.values():  # a cell without its own commit ran at its file's
        for entry in row["parts"].values():
            entry.setdefault("commit", ran_at)
    return rows
