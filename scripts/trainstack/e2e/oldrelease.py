"""The old release's tree for `trainstack e2e --upgrade-from`: its commit exported with `git archive`
into a folder (the checkout is untouched) and its chart dependencies built with its own tooling,
the way a user of that release did."""

from __future__ import annotations

import os
import sys
import tarfile
import tempfile
from pathlib import Path

from .. import proc, release
from ..errors import UserError, output_line


def export_ref(root: Path, version_or_ref: str, dest: Path) -> tuple[str, str]:
    """Write the tree of a release version or git ref into dest (git archive; the checkout is untouched)."""
    commit, label = release.resolve(root, version_or_ref)
    dest.mkdir(parents=True, exist_ok=True)
    archive = proc.run(["git", "-C", str(root), "archive", "--format=tar", commit], text=False, timeout=120,
                       check=False)
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
    result = proc.run([python, "-m", "trainstack", "deps"], cwd=old_root, env=env, timeout=timeout, check=False)
    if result.returncode != 0:
        said = output_line(result.stderr or result.stdout, markers=())
        raise UserError(f"building the old chart's dependencies failed: {said}")
    return old_root / "charts" / "trainstack"
