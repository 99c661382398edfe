"""The e2e tier as three pytest processes side by side, for `make test-e2e` (not a test module).

`python tests/support/e2e_tier.py FOLDER [PYTEST_ARGS...]` runs
- the real-node group, `pytest -v tests/e2e -m "not beside_real_nodes and not real_nodes_2"`,
- the second real-node group, `pytest -v tests/e2e -m real_nodes_2`, its lines prefixed with `[real-2] `,
- beside them, `pytest -v tests/e2e -m beside_real_nodes`, its lines prefixed with `[beside] `,
their output relayed a whole line at a time,
each with its own JUnit file (FOLDER/e2e.xml, FOLDER/e2e-real2.xml and FOLDER/e2e-beside.xml, which
tier_times.py adds up), then writes FOLDER/e2e-groups.json (each group's wall seconds and exit status)
and exits with the tier's status: 0 when every group passed, 5 when none collected a test
(PYTEST_ARGS' -k may leave a group empty: that group alone is no failure), else the first failing
group's status. Which modules run in which group, and why that is safe: tests/e2e/conftest.py.

Three, not more: the beside group alone takes about as long as the tier, but the tier is CPU-bound on 2
cores, and with the beside modules split into two processes the real-node groups slowed by more than the
beside group gained (docs/decisions.md).

Processes rather than pytest-xdist's `--dist loadgroup`: under pytest 9.2 that mode silently
stops grouping (it renames item._nodeid, which pytest 9 no longer reads: pytest-dev/pytest-xdist#1386,
open in December 2026), and a group's modules must never run two at a time.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# name, -m expression, JUnit file, prefix of its output lines
GROUPS = (("real-nodes", "not beside_real_nodes and not real_nodes_2", "e2e.xml", ""),
          ("real-nodes-2", "real_nodes_2", "e2e-real2.xml", "[real-2] "),
          ("beside", "beside_real_nodes", "e2e-beside.xml", "[beside] "))
NO_TESTS = 5  # pytest's exit status when it collected nothing


def _relay(stream, prefix: str) -> None:
    """Copy STREAM's lines to stdout as they come, each whole (so the groups' never mix), with PREFIX."""
    for line in iter(stream.readline, ""):
        sys.stdout.write(prefix + line)
        sys.stdout.flush()


def tier_status(codes: list[int]) -> int:
    """The tier's exit status from each group's (see the module's docstring)."""
    ran = [c for c in codes if c != NO_TESTS]
    if not ran:
        return NO_TESTS
    return next((c for c in ran if c != 0), 0)


def _run(name: str, cmd: list[str], prefix: str, groups: dict[str, dict[str, float | int]]) -> None:
    """Run one group's pytest; record its wall time and exit status in GROUPS when it ends."""
    start = time.monotonic()
    try:
        child = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except OSError as err:
        print(f"{prefix}could not start pytest: {err}", flush=True)
        return
    _relay(child.stdout, prefix)
    code = child.wait()
    groups[name] = {"seconds": round(time.monotonic() - start, 1), "exit": code}


def main(argv: list[str]) -> int:
    folder, extra = Path(argv[0]), argv[1:]
    folder.mkdir(parents=True, exist_ok=True)
    groups: dict[str, dict[str, float | int]] = {}
    threads = []
    for name, marks, junit, prefix in GROUPS:
        (folder / junit).unlink(missing_ok=True)
        # the other processes leave pytest's cache (last failed) to the first
        cache = ["-p", "no:cacheprovider"] if prefix else []
        # -v: a line per test as it ends (the groups' lines are relayed whole, never mixed)
        cmd = [sys.executable, "-m", "pytest", *cache, "-v", "tests/e2e", "-m", marks, f"--junitxml={folder / junit}",
               *extra]
        thread = threading.Thread(target=_run, args=(name, cmd, prefix, groups))
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    (folder / "e2e-groups.json").write_text(json.dumps(groups, indent=2) + "\n")
    groups = {name: groups.get(name, {"seconds": 0.0, "exit": 3}) for name, *_ in GROUPS}  # 3: never started
    print("e2e groups: " + "; ".join(f"{n} {g['seconds']} s, exit {g['exit']}" for n, g in groups.items()))
    return tier_status([int(g["exit"]) for g in groups.values()])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
