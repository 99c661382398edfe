"""bench tests: the per-tier counts come from pytest's own JUnit file."""

from __future__ import annotations

import subprocess
import sys

from trainstack.benchmarks import tests as benchtests


def test_counts_read_from_a_real_pytest_junit_file(tmp_path):
    (tmp_path / "test_sample.py").write_text(
        "import pytest\n"
        "def test_ok(): pass\n"
        "def test_ok_too(): pass\n"
        "def test_bad(): assert False\n"
        "@pytest.mark.skip(reason='x')\n"
        "def test_skipped(): pass\n")
    junit = tmp_path / "out.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}",
                    str(tmp_path / "test_sample.py")], capture_output=True, cwd=tmp_path)
    assert benchtests.junit_counts(junit) == {"tests": 4, "passed": 2, "failed": 1, "errors": 0, "skipped": 1}


def test_a_missing_file_counts_nothing(tmp_path):
    assert benchtests.junit_counts(tmp_path / "none.xml")["passed"] == 0
