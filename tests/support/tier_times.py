"""One test tier's wall time and counts, for the Makefile's test targets (not a test module).

`python tests/support/tier_times.py TIER START EXIT FOLDER`: START is the tier's start (epoch seconds),
EXIT pytest's exit status; reads FOLDER/TIER.xml and FOLDER/TIER-*.xml (pytest's --junitxml; the e2e tier writes one per group)
for the counts and the slowest modules, writes FOLDER/TIER.json ({"tier", "seconds", "exit", "passed",
"failed", "errors", "skipped", "tests", "slowest_modules", and "groups" from FOLDER/TIER-groups.json}) and prints one line with the wall time, then the five slowest modules.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from trainstack.benchmarks.tests import junit_counts, junit_modules


def main(argv: list[str]) -> int:
    tier, start, exit_code, folder = argv[0], float(argv[1]), int(argv[2]), Path(argv[3])
    seconds = round(time.time() - start, 1)
    junits = [folder / f"{tier}.xml", *sorted(folder.glob(f"{tier}-*.xml"))]  # e2e: one per group
    record = {"tier": tier, "seconds": seconds, "exit": exit_code, **junit_counts(*junits),
              "slowest_modules": junit_modules(*junits)}
    groups = folder / f"{tier}-groups.json"  # e2e_tier.py's: each group's wall time
    if groups.is_file() and groups.stat().st_mtime >= start:
        record["groups"] = json.loads(groups.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{tier}.json").write_text(json.dumps(record, indent=2) + "\n")
    print(f"tier {tier}: {seconds} s wall, {record['passed']} passed, {record['failed']} failed, "
          f"{record['errors']} errors, {record['skipped']} skipped, exit {exit_code} "
          f"({folder / f'{tier}.json'})")
    for row in record["slowest_modules"][:5]:
        print(f"  {row['seconds']:>8.1f} s  {row['module']} ({row['tests']} tests)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
