"""`make verify` (trainstack verify): every generator `make generate` runs, run again in a scratch copy
of the checkout; a file the copy ends up different in is named, one line each. The hand edits are
made in a copy of the checkout, never in the working tree. That the working tree itself passes is `make lint`'s
last step (`trainstack verify`), which `make test` runs first: not checked here a second time."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from conftest import ROOT
from support.cli import run_cli
from trainstack import generate

GIT_ENV = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_SYSTEM": os.devnull}


def test_a_hand_edited_or_missing_generated_file_is_named(chart_ready, tmp_path: Path) -> None:
    copy = tmp_path / "checkout"
    generate.copy_checkout(ROOT, copy)  # the files git lists and the built chart dependencies
    subprocess.run(["git", "init", "-q"], cwd=copy, check=True, env={**os.environ, **GIT_ENV})
    subprocess.run(["git", "add", "-A"], cwd=copy, check=True, env={**os.environ, **GIT_ENV})
    with (copy / "CHANGELOG.md").open("a") as changelog:
        changelog.write("- a line written by hand\n")
    (copy / "tests/chart/golden/prod.yaml").unlink()  # gone from the tree: generate writes it again
    (copy / "scripts/trainstack/_version.py").write_text('__version__ = "9.9.9"\n')
    values = copy / "charts/trainstack/values.yaml"  # upstream's part of the Kueue string, edited by hand
    assert "        qps: 300\n" in values.read_text()
    values.write_text(values.read_text().replace("        qps: 300\n", "        qps: 30\n"))
    # the overlays' generated parts: a copy of the shared values edited in place, a chart version by hand
    with (copy / "overlays/staging/production.yaml").open("a") as shared_copy:
        shared_copy.write("monitoring: {enabled: false}\n")
    dev = copy / "overlays/dev/kustomization.yaml"
    dev.write_text(re.sub(r"(?m)^    version: .*$", "    version: 0.0.1", dev.read_text(), count=1))

    result = run_cli("verify", env={"TRAINSTACK_ROOT": str(copy)}, cwd=copy, timeout=900)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.splitlines() == ["stale: CHANGELOG.md", "stale: charts/trainstack/values.yaml",
                                          "stale: overlays/dev/kustomization.yaml",
                                          "stale: overlays/staging/production.yaml",
                                          "stale: scripts/trainstack/_version.py", "stale: tests/chart/golden/prod.yaml"]
    assert "make generate" in result.stderr and len(result.stderr.splitlines()) == 1
