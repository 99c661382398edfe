"""One test tier's wall time and counts, for the Makefile's test targets (not a test module).

`python tests/support/tier_times.py TIER START EXIT FOLDER`: START is the tier's start (epoch seconds),
EXIT pytest's exit status; reads FOLDER/TIER.xml (pytest's --junitxml) for the counts, writes
FOLDER/TIER.json ({"tier", "seconds", "exit", "passed", "failed", "errors", "skipped", "tests"}) and
prints one line with the wall time.
"""

from __future__ import annotations

import json
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path


def counts(junit: Path) -> dict[str, int]:
    """Test counts from pytest's junit XML (zeros when pytest wrote none, e.g. a collection crash)."""
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    try:
        root = ET.parse(junit).getroot()
    except (OSError, ET.ParseError):
        return {"tests": 0, "passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    for suite in suites:
        for key in totals:
            totals[key] += int(suite.get(key, 0))
    passed = totals["tests"] - totals["failures"] - totals["errors"] - totals["skipped"]
    return {"tests": totals["tests"], "passed": passed, "failed": totals["failures"], "errors": totals["errors"],
            "skipped": totals["skipped"]}


def main(argv: list[str]) -> int:
    tier, start, exit_code, folder = argv[0], float(argv[1]), int(argv[2]), Path(argv[3])
    seconds = round(time.time() - start, 1)
    record = {"tier": tier, "seconds": seconds, "exit": exit_code, **counts(folder / f"{tier}.xml")}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{tier}.json").write_text(json.dumps(record, indent=2) + "\n")
    print(f"tier {tier}: {seconds} s wall, {record['passed']} passed, {record['failed']} failed, "
          f"{record['errors']} errors, {record['skipped']} skipped, exit {exit_code} "
          f"({folder / f'{tier}.json'})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
