"""`trainstack bench [PART ...]`: benchmarks; each part writes bench/results/<part>.json.

Parts register here by name as "module:function" (imported only when run), so adding one is a
one-line edit. A part function takes the parsed arguments and returns a JSON-able dict; the
result file also records when, where and with which lock it ran.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .. import paths, progress
from ..errors import UserError

# name -> "module:function"
PARTS: dict[str, str] = {
    "validate": "trainstack.benchmarks.validate:run",
    "e2e": "trainstack.benchmarks.e2e:run",
    "scale": "trainstack.benchmarks.scale:run",
    "gitops": "trainstack.benchmarks.gitops:run",
    "tests": "trainstack.benchmarks.tests:run",
    "fuzz": "trainstack.benchmarks.fuzz:run",
    "matrix": "trainstack.benchmarks.matrix:run",
}
# `trainstack bench` with no part runs these; `tests` (the whole of `make test` on a fresh clone) and `matrix`
# (every tested Kubernetes release, `make test-matrix`) only when named.
DEFAULT_PARTS = ("validate", "e2e", "scale", "gitops", "fuzz")


def results_dir() -> Path:
    return paths.repo_root() / "bench" / "results"


def run_part(name: str, args: argparse.Namespace) -> dict[str, Any]:
    module, _, func = PARTS[name].partition(":")
    fn = getattr(importlib.import_module(module), func)
    start = time.monotonic()
    result = fn(args)
    record = {
        "part": name,
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "wall_seconds": round(time.monotonic() - start, 1),
        **result,
    }
    out = Path(getattr(args, "results_dir", None) or results_dir()) / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, out)
    return record


def run(args: argparse.Namespace) -> int:
    names = args.parts or list(DEFAULT_PARTS)
    unknown = [n for n in names if n not in PARTS]
    if unknown:
        raise UserError(f"unknown bench part(s): {', '.join(unknown)}", f"known: {', '.join(PARTS)}", exit_code=2)
    rows, records = [], []
    for name in names:
        record = run_part(name, args)
        records.append((name, record))
        rows.append(
            (name, f"{record['wall_seconds']:.1f}", record.get("summary", ""),
             str(Path(getattr(args, "results_dir", None) or results_dir()) / f"{name}.json"))
        )
    progress.table("trainstack bench", ["part", "seconds", "result", "file"], rows)
    failed = [f"{name}: {', '.join(record['failed'])}" for name, record in records if record.get("failed")]
    if failed:  # a part that tests something (matrix) fails the command when a check failed
        raise UserError(f"bench failed: {'; '.join(failed)}", "the part's JSON file has each failure's line and log")
    return 0
