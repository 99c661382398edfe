"""bench fuzz: examples and failures come from a real pytest run's hypothesis statistics and JUnit file."""

from __future__ import annotations

import subprocess
import sys

from trainstack.benchmarks import command as benchcommand
from trainstack.benchmarks import fuzz


def test_examples_and_failures_read_from_a_real_hypothesis_run(tmp_path):
    (tmp_path / "test_sample.py").write_text(
        "from hypothesis import given, settings, strategies as st\n"
        "@settings(max_examples=7, derandomize=True, database=None)\n"
        "@given(st.integers())\n"
        "def test_fine(n): pass\n"
        "@settings(max_examples=7, derandomize=True, database=None)\n"
        "@given(st.integers(min_value=0))\n"
        "def test_broken(n): assert n < 3\n")
    junit = tmp_path / "out.xml"
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             "--hypothesis-show-statistics", f"--junitxml={junit}", str(tmp_path / "test_sample.py")],
                            capture_output=True, text=True, cwd=tmp_path)
    runs = fuzz.examples_run(result.stdout)
    assert runs["test_fine"] == 7 and runs["test_broken"] >= 1
    failed = fuzz.failures(junit)
    assert [f["test"] for f in failed] == ["test_broken"] and "n=3" in failed[0]["detail"]


def test_fuzz_is_a_default_bench_part():
    assert benchcommand.PARTS["fuzz"] == "trainstack.benchmarks.fuzz:run" and "fuzz" in benchcommand.DEFAULT_PARTS
