"""One test tier's wall time and counts, for the Makefile's test targets (not a test module).

`python tests/support/tier_times.py TIER START EXIT FOLDER [CPU_TICKS]`: START is the tier's start (epoch seconds),
EXIT pytest's exit status, CPU_TICKS the machine's busy CPU time at the start (busy_ticks: the Makefile reads
/proc/stat with awk); reads FOLDER/TIER.xml and FOLDER/TIER-*.xml (pytest's --junitxml; the e2e tier writes one per group)
for the counts and the slowest modules, writes FOLDER/TIER.json ({"tier", "seconds", "exit", "passed",
"failed", "errors", "skipped", "tests", "slowest_modules", "groups" from FOLDER/TIER-groups.json, and with
CPU_TICKS "cpu_seconds" and "cpu_busy": what every CPU of the machine spent busy while the tier ran, and that
as a share of all CPUs for the wall time; near 1 the tier is CPU-bound, and only less work makes it faster)
and prints one line with the wall time, then the five slowest modules.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from trainstack.benchmarks.tests import junit_counts, junit_modules


def busy_ticks(stat: str) -> int:
    """The machine's busy CPU time in clock ticks from /proc/stat's text: the `cpu` line's user, nice, system,
    irq, softirq and steal (idle and iowait left out); what the Makefile's awk adds up."""
    fields = next(line.split() for line in stat.splitlines() if line.startswith("cpu "))
    return sum(int(fields[i]) for i in (1, 2, 3, 6, 7, 8))


def cpu_use(ticks_at_start: int, ticks_now: int, seconds: float) -> dict[str, float]:
    """{"cpu_seconds", "cpu_busy"} of a tier that ran SECONDS between the two busy-tick readings."""
    cpu_seconds = (ticks_now - ticks_at_start) / os.sysconf("SC_CLK_TCK")
    return {"cpu_seconds": round(cpu_seconds, 1),
            "cpu_busy": round(cpu_seconds / (seconds * (os.cpu_count() or 1)), 2) if seconds > 0 else 0.0}


def main(argv: list[str]) -> int:
    tier, start, exit_code, folder = argv[0], float(argv[1]), int(argv[2]), Path(argv[3])
    seconds = round(time.time() - start, 1)
    junits = [folder / f"{tier}.xml", *sorted(folder.glob(f"{tier}-*.xml"))]  # e2e: one per group
    record = {"tier": tier, "seconds": seconds, "exit": exit_code, **junit_counts(*junits),
              "slowest_modules": junit_modules(*junits)}
    if len(argv) > 4 and argv[4].isdigit():  # no /proc/stat (not Linux): no CPU figures
        record.update(cpu_use(int(argv[4]), busy_ticks(Path("/proc/stat").read_text()), seconds))
    groups = folder / f"{tier}-groups.json"  # e2e_tier.py's: each group's wall time
    if groups.is_file() and groups.stat().st_mtime >= start:
        record["groups"] = json.loads(groups.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{tier}.json").write_text(json.dumps(record, indent=2) + "\n")
    cpu = f", CPU busy {record['cpu_busy']:.0%} ({record['cpu_seconds']} CPU-s)" if "cpu_busy" in record else ""
    print(f"tier {tier}: {seconds} s wall{cpu}, {record['passed']} passed, {record['failed']} failed, "
          f"{record['errors']} errors, {record['skipped']} skipped, exit {exit_code} "
          f"({folder / f'{tier}.json'})")
    for row in record["slowest_modules"][:5]:
        print(f"  {row['seconds']:>8.1f} s  {row['module']} ({row['tests']} tests)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
