"""The `e2e` bench part: the warm time of `make e2e` with the local provider (`--provider local,kind`: with
each provider named, one after another in the same run, so their figures compare).

Warm means the pinned binaries are built; the clock covers everything after that: `make e2e`
(its setup check, rendering, the local cluster, helm install, the controllers, all smoke TrainJobs
Complete, uninstall and teardown). `--cold` also times building every binary the local provider needs
into an empty tool cache and an empty Go build cache (module downloads stay cached); without it the
build times the tool cache recorded, if any, are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .. import images, paths, proc, tools
from .. import lock as lockmod
from ..errors import UserError, output_line

# With the real node (kubelet, containerd, the controllers as pods, two torch trainings): the bar.
GOAL_SECONDS = 150.0
LOCAL_TOOLS = ("kubernetes", "etcd", "kwok", "helm", "trainer-controller", "jobset-controller",
               "kubernetes-node", "containerd", "coredns", "registry", "crane")


def recorded_build_seconds(lock: lockmod.Lock) -> dict[str, float | None]:
    """Build seconds per tool as the tool cache recorded them (the stamp's `seconds`), None when not recorded."""
    out: dict[str, float | None] = {}
    for name in LOCAL_TOOLS:
        stamp = tools.tool_dir(lock.tool(name)) / tools.STAMP
        try:
            seconds = json.loads(stamp.read_text()).get("seconds")
        except (OSError, ValueError):
            seconds = None
        out[name] = round(float(seconds), 1) if isinstance(seconds, (int, float)) else None
    return out


def cold_build(lock: lockmod.Lock) -> dict[str, Any]:
    """Build every tool the local provider needs into an empty tool cache and an empty Go build cache
    (module downloads stay cached: it measures compiling, not the network). Slow: tens of minutes."""
    with tempfile.TemporaryDirectory(prefix="trainstack-cold-") as tmp:
        env = dict(os.environ, TRAINSTACK_CACHE=str(Path(tmp) / "cache"), GOCACHE=str(Path(tmp) / "go-build"))
        start = time.monotonic()
        result = proc.run(
            [sys.executable, "-m", "trainstack", "tools", "install", *LOCAL_TOOLS],
            check=False,
            cwd=paths.repo_root(),
            env=env,
            timeout=4 * 3600,
        )
        seconds = time.monotonic() - start
    if result.returncode != 0:
        said = output_line(result.stderr or result.stdout, markers=(), empty=f"exit {result.returncode}")
        raise UserError(f"cold build failed: {said}")
    return {"cold_build_seconds": round(seconds, 1), "cold_build_tools": list(LOCAL_TOOLS)}


def time_provider(provider: str, runs: int) -> dict[str, Any]:
    """Warm `make e2e PROVIDER=provider`, RUNS times: each run's seconds, the last run's steps and memory."""
    times: list[float] = []
    steps: list[dict[str, Any]] = []
    memory: dict[str, Any] = {}  # the cluster's peak resident memory, of the last run
    for _ in range(max(1, runs)):
        with tempfile.TemporaryDirectory() as tmp:
            summary = Path(tmp) / "summary.json"
            env = dict(os.environ, TRAINSTACK_E2E_SUMMARY=str(summary))
            start = time.monotonic()
            result = proc.run(["make", "e2e", f"PROVIDER={provider}", "ENV=dev"], check=False, cwd=paths.repo_root(),
                              env=env, timeout=2400)
            seconds = time.monotonic() - start
            if result.returncode != 0:
                said = output_line(result.stderr or result.stdout, markers=(), empty=f"exit {result.returncode}")
                raise UserError(f"make e2e PROVIDER={provider} failed during the bench: {said}")
            times.append(round(seconds, 1))
            if summary.is_file():
                said = json.loads(summary.read_text())
                steps, memory = said.get("steps", []), said.get("memory") or {}
    costs = sorted(((s["step"], round(float(s.get("seconds", 0)), 1)) for s in steps), key=lambda c: -c[1])
    return {"warm_seconds": statistics.median(times), "warm_runs_seconds": times, "steps": steps, "memory": memory,
            "main_costs": [{"step": step, "seconds": sec} for step, sec in costs[:5]]}


def run(args: argparse.Namespace) -> dict[str, Any]:
    lock = lockmod.load()
    providers = [p for p in (getattr(args, "providers", None) or "local").split(",") if p]
    measured = {p: time_provider(p, getattr(args, "runs", 1)) for p in providers}
    recorded = recorded_build_seconds(lock)
    cold = cold_build(lock) if getattr(args, "cold", False) else {}
    cold_text = f"; cold build {cold['cold_build_seconds']:.0f}s" if cold else "; cold build: run with --cold"
    said = []
    for provider, m in measured.items():
        peak = f", peak RSS {m['memory']['peak_rss_mib']} MiB" if m["memory"].get("peak_rss_mib") else ""
        said.append(f"{provider} {m['warm_seconds']:.1f}s{peak}")
    first = measured[providers[0]]
    return {
        "summary": f"warm make e2e: {'; '.join(said)} (goal for local < {GOAL_SECONDS:.0f}s){cold_text}",
        **cold,
        # the first provider's figures at the top level (the local provider's, as before)
        "provider": providers[0],
        "warm_seconds": first["warm_seconds"],
        "warm_runs_seconds": first["warm_runs_seconds"],
        "goal_seconds": GOAL_SECONDS,
        "meets_goal": first["warm_seconds"] < GOAL_SECONDS if providers[0] == "local" else None,
        "steps": first["steps"],
        "memory": first["memory"],
        "providers": measured,
        "recorded_build_seconds_by_tool": recorded,
        "images": images_record(),
    }


def images_record() -> dict[str, Any]:
    """Per built image: its reference, compressed size in the registry and how long its cold build took."""
    path = images.record_path()
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
