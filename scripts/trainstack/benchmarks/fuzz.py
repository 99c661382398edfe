"""`trainstack bench fuzz`: a longer, randomized run of validate's property tests.

CI runs tests/chart/validate/test_fuzz.py derandomized (the same examples every time); this part runs the
same strategies with TRAINSTACK_FUZZ_EXAMPLES examples per test and a fresh random seed, so new inputs
are tried on every run. The strategies stay in the test module (hypothesis is a test dependency), so
the part runs pytest on it and records the examples run, the seconds and the failures (with
hypothesis' falsifying example) in bench/results/fuzz.json.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from .. import paths, proc, progress
from .tests import junit_counts

TEST_FILE = "tests/chart/validate/test_fuzz.py"
SELECT = "never_crash"  # the property tests; the fixed examples run in CI already
DEFAULT_EXAMPLES = 5000
TIMEOUT_S = 4 * 3600

_SECTION = re.compile(r"^(\S+::\w+):\s*$", re.MULTILINE)
_CASES = re.compile(r"- (\d+) passing, (\d+) failing, and (\d+) invalid test cases")


def examples_run(output: str) -> dict[str, int]:
    """Examples each test ran (passing + failing, every phase), from --hypothesis-show-statistics."""
    found: dict[str, int] = {}
    sections = list(_SECTION.finditer(output))
    for i, section in enumerate(sections):
        end = sections[i + 1].start() if i + 1 < len(sections) else len(output)
        body = output[section.end():end]
        counts = [(int(p), int(f)) for p, f, _ in _CASES.findall(body)]
        if counts:
            found[section.group(1).rsplit("::", 1)[1]] = sum(p + f for p, f in counts)
    return found


def failures(junit: Path) -> list[dict[str, str]]:
    """Each failing test with the end of its failure text (hypothesis prints the falsifying example there)."""
    if not junit.is_file():
        return []
    out = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        for problem in [*case.findall("failure"), *case.findall("error")]:
            text = problem.text or problem.get("message") or ""
            out.append({"test": case.get("name", ""), "detail": text[-2000:]})
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    wanted = getattr(args, "fuzz_examples", None) or DEFAULT_EXAMPLES
    with tempfile.TemporaryDirectory(prefix="trainstack-fuzz-") as scratch:
        junit = Path(scratch) / "fuzz.xml"
        env = {**os.environ, "TRAINSTACK_FUZZ_EXAMPLES": str(wanted)}
        start = time.monotonic()
        with progress.step(f"fuzzing validate: {wanted} randomized examples per property test"):
            result = proc.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", TEST_FILE,
                               "-k", SELECT, "--hypothesis-show-statistics", f"--junitxml={junit}"],
                              check=False, cwd=paths.repo_root(), env=env, timeout=TIMEOUT_S, what="pytest (fuzz)")
        seconds = round(time.monotonic() - start, 1)
        counts = junit_counts(junit)
        failed = failures(junit)
    per_test = examples_run(result.stdout)
    return {
        "examples_per_test": wanted,
        "examples_run": per_test,
        "examples_total": sum(per_test.values()),
        "seconds": seconds,
        "tests": counts,
        "failures": failed,
        "pytest_exit_code": result.returncode,
        "summary": (f"{sum(per_test.values())} examples, {len(failed)} failure(s)" if result.returncode in (0, 1)
                    else f"pytest exited {result.returncode}"),
    }
