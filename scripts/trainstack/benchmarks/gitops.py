"""The `gitops` bench part: the warm time of `make e2e-gitops` (bar: GOAL_SECONDS) and Argo CD's
build time, as its tool stamp recorded it or, with --cold, a fresh build."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .. import lock as lockmod
from .. import paths, proc, tools
from ..errors import UserError, output_line

GOAL_SECONDS = 180.0


def argocd_build_seconds(lock: lockmod.Lock, cold: bool = False) -> dict[str, Any]:
    """Argo CD's build time: as its tool stamp recorded it (the build that installed it), or, with cold,
    a fresh build into an empty tool cache and Go build cache (module downloads stay cached)."""
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
            result = proc.run([sys.executable, "-m", "trainstack", "tools", "install", "argocd"], check=False,
                              cwd=paths.repo_root(), env=env, timeout=4 * 3600)
            if result.returncode != 0:
                raise UserError(f"cold build of Argo CD failed: {output_line(result.stderr, markers=())}")
            out["argocd_cold_build_seconds"] = round(time.monotonic() - start, 1)
    return out


def run(args: Any) -> dict[str, Any]:
    """Warm `make e2e-gitops` (bar: GOAL_SECONDS) and Argo CD's build time."""
    lock = lockmod.load()
    build = argocd_build_seconds(lock, cold=bool(getattr(args, "cold", False)))
    if tools.find("argocd", lock) is None:
        return {"summary": "skipped: Argo CD is not built (make setup-gitops)", **build}
    with tempfile.TemporaryDirectory() as tmp:
        summary_file = Path(tmp) / "summary.json"
        env = dict(os.environ, TRAINSTACK_E2E_SUMMARY=str(summary_file))
        start = time.monotonic()
        result = proc.run(["make", "e2e-gitops", "ENV=dev"], check=False, cwd=paths.repo_root(), env=env,
                          timeout=3600)
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
