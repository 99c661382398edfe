"""`trainstack bench tests`: what `make test` costs, per tier, on a fresh clone of this checkout.

It clones HEAD (committed work only) into a scratch folder, then runs what `make test` runs, one
make target at a time so each is timed on its own: `make setup-gitops` (what `make test` sets up: `make
setup` and Argo CD for the GitOps module; every step skips itself when the tool cache is warm), `make lint`, then `make test-unit`, `test-chart`, `test-integration` and
`test-e2e`. Each tier's pytest writes a JUnit file (artifacts/test-times/TIER.xml); its counts (passed, failed, skipped, errors),
its slowest modules, the tier's wall time and the CPU time the machine spent meanwhile go into bench/results/tests.json beside the budgets the fast-feedback work set
(warm `make test` 15 minutes, bar 20; cold setup plus `make test` 60 minutes), with how fast the machine was
before and after (machine_speed: a fixed Python loop, process starts and synced writes; runs on a shared host
differ by minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import paths, proc, progress

TIERS = ("unit", "chart", "integration", "e2e")
BUDGET_WARM_S = 15 * 60
BAR_WARM_S = 20 * 60
BUDGET_COLD_S = 60 * 60
# The machine's speed at the moment (machine_speed): this kind of machine shares its host, and the same commit's
# e2e tier differs by minutes from one run to another (bench/results/README.md), so each record says how fast the
# machine was before the first step and after the last. A Python loop alone can miss a slowdown of process starts
# and disk writes, so those are measured too.
REFERENCE_LOOP = 20_000_000
STARTS = 20
SYNCED_FILES = 16


def _roots(paths: tuple[Path, ...]) -> list[ET.Element]:
    """The parsed JUnit files of PATHS that exist (a tier that crashed early writes none)."""
    return [ET.parse(p).getroot() for p in paths if p.is_file()]


def junit_counts(*paths: Path) -> dict[str, int]:
    """passed/failed/errors/skipped of pytest JUnit files, added up (all zero when none exists)."""
    counts = {"tests": 0, "failed": 0, "errors": 0, "skipped": 0}
    for root in _roots(paths):
        suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
        for suite in suites:
            counts["tests"] += int(suite.get("tests", 0))
            counts["failed"] += int(suite.get("failures", 0))
            counts["errors"] += int(suite.get("errors", 0))
            counts["skipped"] += int(suite.get("skipped", 0))
    counts["passed"] = counts["tests"] - counts["failed"] - counts["errors"] - counts["skipped"]
    return counts


def junit_modules(*paths: Path, top: int = 12) -> list[dict[str, Any]]:
    """The TOP test modules of pytest JUnit files by the seconds their tests took (setup and teardown
    included: a module's own cluster counts), slowest first: [{"module", "seconds", "tests"}]."""
    seconds: dict[str, float] = {}
    tests: dict[str, int] = {}
    for case in (c for root in _roots(paths) for c in root.iter("testcase")):
        # classname is the test's dotted module path (plus its class, if any): tests.e2e.test_gitops[.Class]
        parts = (case.get("classname") or "?").split(".")
        module = "/".join(p for p in parts if not p[:1].isupper()) + ".py"
        seconds[module] = seconds.get(module, 0.0) + float(case.get("time") or 0)
        tests[module] = tests.get(module, 0) + 1
    ranked = sorted(seconds, key=lambda m: -seconds[m])[:top]
    return [{"module": m, "seconds": round(seconds[m], 1), "tests": tests[m]} for m in ranked]


def tool_cache_warm() -> bool:
    """Whether the tool cache holds built tools (a warm machine) before the run."""
    tools_dir = paths.cache_dir() / "tools"
    return tools_dir.is_dir() and any(tools_dir.iterdir())


def tier_cpu(record: Path) -> dict[str, float]:
    """cpu_seconds and cpu_busy from a tier's record (tests/support/tier_times.py: what the machine's CPUs spent
    busy while the tier ran); none when the record or the figures are missing."""
    try:
        data = json.loads(record.read_text())
    except (OSError, ValueError):
        return {}
    return {k: data[k] for k in ("cpu_seconds", "cpu_busy") if isinstance(data.get(k), (int, float))}


def _fastest(work: Callable[[], object], repeat: int) -> float:
    """The fastest of REPEAT runs of WORK(), in seconds (rounded to the millisecond)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - start)
    return round(best, 3)


def reference_seconds(repeat: int = 3, loop: int = REFERENCE_LOOP) -> float:
    """The fastest of REPEAT runs of a fixed pure-Python loop (the sum of the squares below LOOP), in seconds:
    about 0.95 on this kind of machine, more when its host gives it less."""
    return _fastest(lambda: sum(i * i for i in range(loop)), repeat)


def start_seconds(repeat: int = 3, starts: int = STARTS) -> float:
    """The fastest of REPEAT runs of STARTS Python interpreters started one after another (`python -c pass`), in
    seconds: what starting a process costs (the suite starts thousands: kubectl, helm, runc, python)."""

    def start_all() -> None:
        for _ in range(starts):
            proc.run([sys.executable, "-c", "pass"], timeout=60)

    return _fastest(start_all, repeat)


def sync_seconds(folder: Path, repeat: int = 3, files: int = SYNCED_FILES) -> float:
    """The fastest of REPEAT runs of writing FILES files of 256 KiB in FOLDER, each flushed to disk (fsync), in
    seconds: what etcd's and containerd's synced writes wait for."""
    block = os.urandom(256 * 1024)
    with tempfile.TemporaryDirectory(prefix="reference-", dir=folder) as scratch:

        def write_all() -> None:
            for i in range(files):
                with open(Path(scratch) / f"{i}", "wb") as out:
                    out.write(block)
                    out.flush()
                    os.fsync(out.fileno())

        return _fastest(write_all, repeat)


def machine_speed(folder: Path) -> dict[str, float]:
    """How fast the machine is now: the Python loop's, the process starts' and the synced writes' seconds."""
    return {"python_loop_s": reference_seconds(), "process_starts_s": start_seconds(),
            "synced_writes_s": sync_seconds(folder)}


def _make(clone: Path, target: str, log: Path, extra: dict[str, str] | None = None) -> tuple[float, int]:
    start = time.monotonic()
    env = {**os.environ, **(extra or {})}
    env.pop("TRAINSTACK_ROOT", None)  # the clone is its own root
    with open(log, "w", encoding="utf-8") as out:
        result = proc.run(["make", target, *[f"{k}={v}" for k, v in (extra or {}).items()]], check=False,
                          capture=False, stdout=out, stderr=proc.STDOUT, cwd=clone, env=env, what=f"make {target}")
    return round(time.monotonic() - start, 1), result.returncode


def run(args: argparse.Namespace) -> dict[str, Any]:
    root = paths.repo_root()
    tiers = [t for t in (getattr(args, "tiers", None) or ",".join(TIERS)).split(",") if t]
    head = proc.output(["git", "-C", str(root), "rev-parse", "HEAD"]).strip()
    dirty = bool(proc.output(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"]).strip())
    warm = tool_cache_warm()
    scratch = Path(tempfile.mkdtemp(prefix="trainstack-bench-tests-"))
    clone = scratch / "trainstack"
    logs = root / "artifacts" / "bench-tests"
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir(parents=True)
    rows: list[dict[str, Any]] = []
    paths.cache_dir().mkdir(parents=True, exist_ok=True)
    speed = {"before": machine_speed(paths.cache_dir())}  # where the clusters write
    try:
        proc.run(["git", "clone", "-q", "--no-hardlinks", str(root), str(clone)], timeout=300)
        for step, target in (("setup", "setup-gitops"), ("lint", "lint")):  # make test's prerequisites
            with progress.step(f"make {target} (fresh clone)"):
                seconds, code = _make(clone, target, logs / f"{step}.log")
            rows.append({"step": step, "target": target, "seconds": seconds, "exit": code})
        for tier in tiers:
            with progress.step(f"make test-{tier} (fresh clone)"):
                seconds, code = _make(clone, f"test-{tier}", logs / f"test-{tier}.log")
            # the tier target's own JUnit files: artifacts/test-times/TIER.xml, and TIER-*.xml (e2e: one per group)
            times = clone / "artifacts" / "test-times"
            junits = []
            for found in [times / f"{tier}.xml", *sorted(times.glob(f"{tier}-*.xml"))]:
                if found.is_file():
                    junits.append(Path(shutil.copy(found, logs / found.name)))
            row = {"step": f"test-{tier}", "tier": tier, "seconds": seconds, "exit": code, **junit_counts(*junits),
                   "slowest_modules": junit_modules(*junits)}
            if (times / f"{tier}-groups.json").is_file():  # the e2e tier's groups, side by side
                row["groups"] = json.loads((times / f"{tier}-groups.json").read_text())
            row.update(tier_cpu(times / f"{tier}.json"))
            rows.append(row)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    speed["after"] = machine_speed(paths.cache_dir())
    return {
        "commit": head,
        "uncommitted_changes_left_out": dirty,
        "tool_cache_warm_at_start": warm,
        "machine_reference": {"what": f"before the first step and after the last, each the fastest of 3 runs: "
                                      f"sum(i * i for i in range({REFERENCE_LOOP:_})) in Python (python_loop_s), "
                                      f"{STARTS} Python interpreters started one after another (process_starts_s), "
                                      f"{SYNCED_FILES} files of 256 KiB written and fsynced in the tool cache "
                                      "(synced_writes_s)", **speed},
        "steps": rows,
        "budget": {"warm_make_test_s": BUDGET_WARM_S, "warm_bar_s": BAR_WARM_S, "cold_setup_and_test_s": BUDGET_COLD_S},
        **verdict(rows, warm),
        "logs": str(logs),
    }


def verdict(rows: list[dict[str, Any]], warm: bool) -> dict[str, Any]:
    """What the steps' ROWS add up to: the seconds in all, the failed steps, whether the run passed within its
    budget (warm: the goal, and the bar apart; cold: setup plus make test) and a one-line summary. A run with a
    failed step is within no budget, whatever its time."""
    total = round(sum(r["seconds"] for r in rows), 1)
    failed = [r["step"] for r in rows if r["exit"] != 0]
    passed = sum(r.get("passed", 0) for r in rows)
    result: dict[str, Any] = {
        "make_test_seconds": total,
        "failed_steps": failed,
        "within_budget": not failed and total <= (BUDGET_WARM_S if warm else BUDGET_COLD_S),
        "summary": f"{'warm' if warm else 'cold'} make test {total / 60:.1f} min, {passed} passed"
                   + (f", failed: {', '.join(failed)}" if failed else ""),
    }
    if warm:
        result["within_bar"] = not failed and total <= BAR_WARM_S
    return result
