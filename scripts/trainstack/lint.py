"""`trainstack lint` (`make lint`, run by `make test`): ruff over the Python, `helm lint --strict`
over the chart with its defaults and with each environment's values.

Both are pinned: ruff by the lock (`python.test`, an exact version: what it reports changes from
release to release) and checked here against what is installed; helm is the lock's helm v4.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path

from packaging.specifiers import SpecifierSet

from . import helm, paths
from . import lock as lockmod
from . import render as rendermod
from .errors import UserError, output_line

PYTHON_TREES = ("scripts", "tests", "examples")


@dataclass
class Check:
    name: str
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def ruff_check(lock: lockmod.Lock, trees: tuple[str, ...] = PYTHON_TREES, root: Path | None = None) -> Check:
    """ruff check over TREES (relative to ROOT, default the repository), with pyproject.toml's settings."""
    check = Check("ruff")
    wanted = SpecifierSet(lock.get("python", "test", "ruff"))
    try:
        installed = metadata.version("ruff")
    except metadata.PackageNotFoundError:
        raise UserError(f"ruff is not installed (the lock pins ruff{wanted})", "run 'make venv'") from None
    if installed not in wanted:
        raise UserError(f"ruff {installed} is installed but the lock pins ruff{wanted}", "run 'make venv'")
    root = root or paths.repo_root()
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--output-format", "concise", "--no-cache",
                             "--config", str(paths.repo_root() / "pyproject.toml"),
                             *[t for t in trees if (root / t).exists()]],
                            capture_output=True, text=True, cwd=root, timeout=300)
    if result.returncode not in (0, 1):
        raise UserError(f"ruff failed: {output_line(result.stderr or result.stdout, markers=())}")
    check.problems = [line for line in result.stdout.splitlines()
                      if line.strip() and not line.startswith(("Found ", "[*]", "No fixes", "All checks passed"))]
    return check


def helm_lint(lock: lockmod.Lock, runs: dict[str, list[Path]] | None = None) -> Check:
    """`helm lint --strict` with the chart's defaults, then with each environment's values files
    (RUNS: label -> values files, default every environment under overlays/)."""
    check = Check("helm lint")
    chart = paths.chart_dir()
    if runs is None:
        runs = {"defaults": []} | {env: rendermod.values_files(env) for env in rendermod.environments()}
    for label, files in runs.items():
        values = [arg for f in files for arg in ("-f", str(f))]
        result = helm.run(["lint", "--strict", str(chart), *values], lock=lock, check=False, timeout=300)
        if result.returncode != 0:
            lines = [ln.strip() for ln in (result.stdout + result.stderr).splitlines()
                     if ln.strip().startswith(("[ERROR]", "[WARNING]", "Error:"))]
            check.problems.append(f"{label}: {lines[0] if lines else helm.first_error_line(result.stderr)}")
    return check


def run(lock: lockmod.Lock | None = None) -> list[Check]:
    lock = lock or lockmod.load()
    return [ruff_check(lock), helm_lint(lock)]


def _cmd(args: argparse.Namespace) -> int:
    checks = run()
    if args.output == "json":
        print(json.dumps([asdict(c) | {"ok": c.ok} for c in checks], indent=2))
    else:
        for check in checks:
            print(f"{check.name}: {'ok' if check.ok else f'{len(check.problems)} problem(s)'}")
            for problem in check.problems:
                print(f"  {problem}")
    return 0 if all(c.ok for c in checks) else 1


def register(sub) -> None:
    parser = sub.add_parser("lint", help="ruff over the Python and helm lint --strict over the chart (pinned)")
    parser.add_argument("--output", choices=["text", "json"], default="text")
    parser.set_defaults(func=_cmd)
