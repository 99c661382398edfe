"""`trainstack generate` (make generate) and `trainstack verify` (make verify): every generated file.

One list, STEPS, names every generator of a file trainstack commits: the versions the lock pins
(`lock sync`), the Kueue configuration string in values.yaml (`kueueconfig`), the version of the
newest release (`_version.py`, Chart.yaml's `version`), the overlays' published chart and shared
values copies (`overlaysync`), CHANGELOG.md,
the chart README, values.schema.json and the runtime and rule tables of docs/runtimes.md and
docs/guardrails.md (`trainstack docs`), docs/guardrails.md's field review (`validate.review`), the table
of benchmark records in bench/results/README.md (`benchdocs`), docs/architecture.md's module map
(`modulemap`) and the golden renders (tests/chart/golden.py). `generate` runs them in
order on a checkout; `verify` runs the same steps on a scratch copy of the checkout (its tracked
files and its untracked files that git does not ignore, and the built chart dependencies)
and fails naming each file the copy ended up different from the working tree. So there is one
staleness check, and it cannot miss a generator: a file is stale exactly when `make generate`
would change it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from . import chartdocs, kueueconfig, locksync, overlaysync, paths, proc, release
from . import lock as lockmod
from .errors import UserError, output_line
from .validate import review

# Built by `trainstack deps` (git ignores them): the renders read them, verify copies them too (about 5 MB).
BUILD_OUTPUTS = ("charts/trainstack/charts", "charts/trainstack/crds")
SKIP_NAMES = {"__pycache__", ".pytest_cache", ".ruff_cache", ".hypothesis", ".mypy_cache", ".grimp_cache"}


@contextlib.contextmanager
def _rooted_at(root: Path) -> Iterator[None]:
    """paths.repo_root() is ROOT while the in-process generators run (they read it, not an argument)."""
    old = os.environ.get("TRAINSTACK_ROOT")
    os.environ["TRAINSTACK_ROOT"] = str(root)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TRAINSTACK_ROOT", None)
        else:
            os.environ["TRAINSTACK_ROOT"] = old


def _lock_sync(root: Path) -> None:

    loaded = lockmod.load(root / "trainstack.lock.yaml")
    problems = loaded.problems()
    if problems:  # never write versions from a lock that is not sound
        raise UserError(problems[0], "fix trainstack.lock.yaml, then run 'make generate' again")
    locksync.sync(root, lock=loaded)


def _kueue_config(root: Path) -> None:

    kueueconfig.write(root)


def _version(root: Path) -> None:

    release.write_version(root)


def _overlays(root: Path) -> None:

    overlaysync.write(root)


def _changelog(root: Path) -> None:

    release.write_changelog(root)


def _docs(root: Path) -> None:

    chartdocs.write(chart_dir=root / "charts" / "trainstack")


def _review(root: Path) -> None:

    if review.main(["write"]) != 0:  # it printed the fields nobody reviewed yet
        raise UserError(f"{review.REVIEW_FILE}: fields of the pinned CRDs are not reviewed (listed above)")


def _module_map(root: Path) -> None:
    from . import modulemap

    modulemap.write(root)


def _bench_records(root: Path) -> None:
    from . import benchdocs

    benchdocs.write(root)


def _golden(root: Path) -> None:
    # A script of the chart tier (it renders every environment in a subprocess of its own), run with
    # the package and the root of the tree it writes into.
    script = root / "tests" / "chart" / "golden.py"
    env = {**os.environ, "TRAINSTACK_ROOT": str(root), "PYTHONPATH": str(root / "scripts")}
    result = proc.run([sys.executable, str(script), "write"], check=False, cwd=root, env=env, timeout=1800)
    if result.returncode != 0:
        raise UserError(f"tests/chart/golden.py write failed in {root}: {output_line(result.stderr or result.stdout)}")


@dataclass(frozen=True)
class Step:
    name: str
    writes: str  # what it writes, for --help and the docs
    run: Callable[[Path], None]


# In order: the lock's versions and the release's version reach Chart.yaml, values.yaml and pyproject
# before the docs and the renders read them.
STEPS = [
    Step("lock sync", "Chart.yaml dependencies, values.yaml images, the chart README header, pyproject.toml", _lock_sync),
    Step("kueue config", "values.yaml's Kueue configuration string (upstream's default at the pinned Kueue + trainstack's keys)",
         _kueue_config),
    Step("version", "scripts/trainstack/_version.py and Chart.yaml's version (the newest release)", _version),
    Step("overlays", "the published chart each overlays/ENV/kustomization.yaml names (releases.yaml's chartRepository "
         "and version), and the copies of overlays/shared/ files the overlays list", _overlays),
    Step("changelog", "CHANGELOG.md (releases.yaml)", _changelog),
    Step("docs", "the chart README, values.schema.json, the tables of docs/runtimes.md and docs/guardrails.md", _docs),
    Step("review", "docs/guardrails.md's field review", _review),
    Step("bench records", "bench/results/README.md's table of the JSON records", _bench_records),
    Step("module map", "docs/architecture.md's module map (layers.toml and each module's docstring)", _module_map),
    Step("golden", "tests/chart/golden/ENV.yaml", _golden),
]


def generate(root: Path | None = None) -> list[tuple[str, float]]:
    """Run every step on ROOT (default the checkout); (step, seconds) each."""
    root = (root or paths.repo_root()).resolve()
    times = []
    with _rooted_at(root):
        for step in STEPS:
            start = time.monotonic()
            step.run(root)
            times.append((step.name, time.monotonic() - start))
    return times


# -- verify -----------------------------------------------------------------------------------


def _under(rel: str, folders: tuple[str, ...]) -> bool:
    return any(rel == f or rel.startswith(f + "/") for f in folders)


def checkout_files(root: Path) -> list[str]:
    """The files of the checkout as git sees them: tracked, and untracked but not ignored (relative)."""
    try:
        result = proc.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                          check=False, timeout=60)
    except proc.CommandError as err:
        if err.missing:
            raise UserError("git is not installed", "make verify copies the files git lists") from None
        raise
    if result.returncode != 0:
        raise UserError(f"git ls-files failed in {root}: {output_line(result.stderr, markers=())}",
                        "make verify runs in a git checkout")
    rels = sorted({r for r in result.stdout.split("\0") if r})
    return [r for r in rels if not _under(r, BUILD_OUTPUTS) and os.path.lexists(root / r)]


def copy_checkout(root: Path, dest: Path) -> None:
    """Copy ROOT's files (checkout_files, symlinks as links) and the built chart dependencies to DEST."""
    for rel in checkout_files(root):
        src, dst = root / rel, dest / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), dst)
        else:
            shutil.copy2(src, dst)
    for rel in BUILD_OUTPUTS:  # copied, not linked: a render that rebuilds them writes into the copy only
        if (root / rel).is_dir():
            shutil.copytree(root / rel, dest / rel, symlinks=True)


def _tree(root: Path) -> set[str]:
    out: set[str] = set()
    for folder, dirs, files in os.walk(root):
        base = Path(folder)
        dirs[:] = [d for d in dirs if d not in SKIP_NAMES and d != ".git"
                   and not _under((base / d).relative_to(root).as_posix(), BUILD_OUTPUTS)]
        out.update((base / name).relative_to(root).as_posix() for name in files if not name.endswith(".pyc"))
        # a symlink to a folder is listed by os.walk among dirs, not followed
        out.update((base / d).relative_to(root).as_posix() for d in dirs if (base / d).is_symlink())
    return out


def _same(a: Path, b: Path) -> bool:
    if a.is_symlink() or b.is_symlink():
        return a.is_symlink() and b.is_symlink() and os.readlink(a) == os.readlink(b)
    return a.is_file() and b.is_file() and a.read_bytes() == b.read_bytes()


def stale_files(root: Path, scratch: Path) -> list[str]:
    """The files (relative) in which SCRATCH, after generate, differs from ROOT: changed, new or gone."""
    before = set(checkout_files(root))
    after = _tree(scratch)
    return sorted(rel for rel in before | after if not _same(root / rel, scratch / rel))


def verify(root: Path | None = None, keep: Path | None = None) -> list[str]:
    """Regenerate every generated file in a scratch copy of ROOT; the files `make generate` would change."""
    root = (root or paths.repo_root()).resolve()
    missing = [rel for rel in BUILD_OUTPUTS if not (root / rel).is_dir()]
    if missing:
        raise UserError(f"{root / missing[0]} is missing: the renders need the built chart dependencies",
                        "run 'make setup-chart' (or 'trainstack deps')")
    with tempfile.TemporaryDirectory(prefix="trainstack-verify-") as tmp:
        scratch = Path(tmp) / "tree"
        copy_checkout(root, scratch)
        generate(scratch)
        stale = stale_files(root, scratch)
        if keep is not None:
            shutil.copytree(scratch, keep, symlinks=True, dirs_exist_ok=True)
    return stale


# -- CLI --------------------------------------------------------------------------------------
