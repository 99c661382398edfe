"""Where a tier's CPU goes, per test: a pytest plugin, and a summary of what it recorded.

The e2e tier is CPU-bound on 2 cores (its groups run side by side), so its wall time follows the CPU its
tests spend, counted across every process they start (API servers, kubelets, pods, helm, torch). Run a
group alone with the plugin, e.g.

    TRAINSTACK_TEST_CPU=r2.jsonl PYTHONPATH=tests .venv/bin/pytest -p support.cpu_profile tests/e2e -m real_nodes_2

and each test appends a JSON line: its node id, wall seconds and the CPU seconds the whole machine spent
meanwhile (/proc/stat; a module's cluster start counts in its first test). Alone means alone: with other
work running the figures include it. Then

    .venv/bin/python tests/support/cpu_profile.py r1.jsonl r2.jsonl beside.jsonl > e2e-cpu.json

adds them up per module, most CPU first, and prints a table on stderr.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

OUT = "TRAINSTACK_TEST_CPU"
TICKS = os.sysconf("SC_CLK_TCK")


def busy_seconds() -> float:
    """CPU seconds the machine has spent busy since boot (every CPU; idle and iowait left out)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return (sum(fields) - fields[3] - fields[4]) / TICKS


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    out = os.environ.get(OUT)
    cpu, wall = busy_seconds(), time.monotonic()
    yield
    if out:
        row = {"test": item.nodeid, "wall": round(time.monotonic() - wall, 1), "cpu": round(busy_seconds() - cpu, 1)}
        with open(out, "a") as sink:
            sink.write(json.dumps(row) + "\n")


def summary(files: list[Path]) -> dict:
    """Per file (a group run alone) and per module: tests, wall and CPU seconds; modules by CPU, most first."""
    groups, modules = {}, defaultdict(lambda: {"tests": 0, "wall": 0.0, "cpu": 0.0, "group": ""})
    for path in files:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        groups[path.stem] = {"tests": len(rows), "wall": round(sum(r["wall"] for r in rows), 1),
                             "cpu": round(sum(r["cpu"] for r in rows), 1)}
        for row in rows:
            module = modules[row["test"].split("::")[0]]
            module["tests"] += 1
            module["wall"] = round(module["wall"] + row["wall"], 1)
            module["cpu"] = round(module["cpu"] + row["cpu"], 1)
            module["group"] = path.stem
    ranked = dict(sorted(modules.items(), key=lambda kv: -kv[1]["cpu"]))
    return {"groups": groups, "cpu": round(sum(g["cpu"] for g in groups.values()), 1), "modules": ranked}


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: cpu_profile.py GROUP.jsonl ... (see the module's docstring)", file=sys.stderr)
        return 2
    data = summary([Path(a) for a in argv])
    print(json.dumps(data, indent=2))
    for name, module in data["modules"].items():
        print(f"{module['cpu']:8.1f} CPU-s {module['wall']:8.1f} s  {module['tests']:3d} tests  {name}", file=sys.stderr)
    print(f"{data['cpu']:8.1f} CPU-s in all", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
