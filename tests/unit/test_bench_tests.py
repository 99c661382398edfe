"""bench tests: the per-tier counts come from pytest's own JUnit file."""

from __future__ import annotations

import subprocess
import sys

import pytest

from support import e2e_tier
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


def test_slowest_modules_sum_each_modules_tests_with_their_fixtures(tmp_path):
    pkg = tmp_path / "tests" / "e2e"
    pkg.mkdir(parents=True)
    (tmp_path / "tests" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "test_slow.py").write_text(
        "import time, pytest\n"
        "@pytest.fixture(scope='module')\n"
        "def cluster():\n"
        "    time.sleep(0.6)\n"
        "    yield\n"
        "def test_a(cluster): pass\n"
        "class TestMore:\n"
        "    def test_b(self, cluster): time.sleep(0.2)\n")
    (pkg / "test_fast.py").write_text("def test_c(): pass\n")
    junit = tmp_path / "out.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}",
                    "tests"], capture_output=True, cwd=tmp_path)
    rows = benchtests.junit_modules(junit)
    assert [(r["module"], r["tests"]) for r in rows] == [("tests/e2e/test_slow.py", 2), ("tests/e2e/test_fast.py", 1)]
    assert rows[0]["seconds"] >= 0.8 > rows[1]["seconds"]
    assert benchtests.junit_modules(tmp_path / "none.xml") == []


def test_counts_of_the_e2e_groups_add_up(tmp_path):
    for name, body in (("a", "def test_ok(): pass\n"), ("b", "def test_ok(): pass\ndef test_bad(): assert False\n")):
        (tmp_path / f"test_{name}.py").write_text(body)
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={tmp_path / name}.xml",
                        str(tmp_path / f"test_{name}.py")], capture_output=True, cwd=tmp_path)
    both = benchtests.junit_counts(tmp_path / "a.xml", tmp_path / "b.xml", tmp_path / "missing.xml")
    assert both == {"tests": 3, "passed": 2, "failed": 1, "errors": 0, "skipped": 0}
    assert {r["module"]: r["tests"] for r in benchtests.junit_modules(tmp_path / "a.xml", tmp_path / "b.xml")} == {
        "test_a.py": 1, "test_b.py": 2}


@pytest.mark.parametrize(("codes", "status"), [
    ([0, 0], 0), ([1, 0], 1), ([0, 1], 1), ([2, 1], 2),
    ([5, 0], 0), ([0, 5], 0), ([5, 1], 1),  # -k left one group empty: no failure by itself
    ([5, 5], 5),  # neither group collected a test: the Makefile fails the tier
])
def test_the_e2e_tiers_status_from_its_two_groups(codes, status):
    assert e2e_tier.tier_status(codes) == status


def test_a_run_is_within_budget_only_when_every_step_passed():
    from trainstack.benchmarks import tests as benchtests

    passing = [{"step": "setup", "seconds": 22.0, "exit": 0}, {"step": "test-e2e", "seconds": 1080.0, "exit": 0, "passed": 9}]
    warm = benchtests.verdict(passing, warm=True)
    assert warm["make_test_seconds"] == 1102.0 and warm["failed_steps"] == []
    assert warm["within_budget"] is False and warm["within_bar"] is True  # 18.4 min: over the goal, under the bar
    failing = [{**passing[0]}, {**passing[1], "exit": 2}]
    cold = benchtests.verdict(failing, warm=False)
    assert cold["failed_steps"] == ["test-e2e"] and cold["within_budget"] is False  # 18 min cold, but it failed
    assert "within_bar" not in cold
    assert benchtests.verdict(passing, warm=False)["within_budget"] is True


def test_a_tiers_cpu_figures_come_from_proc_stat_busy_fields(tmp_path):
    """busy_ticks adds user, nice, system, irq, softirq and steal (not idle, not iowait), as the Makefile's awk
    does; cpu_use turns two readings into CPU seconds and the busy share of all CPUs; the bench copies both."""
    import os

    from support import tier_times

    stat = ("cpu  100 5 40 9000 70 3 2 1 0 0\ncpu0 50 2 20 4500 35 1 1 0 0 0\nintr 1 2 3\n")
    assert tier_times.busy_ticks(stat) == 100 + 5 + 40 + 3 + 2 + 1
    awk = subprocess.run(["awk", "/^cpu /{print $2+$3+$4+$7+$8+$9}"], input=stat, capture_output=True, text=True)
    assert int(awk.stdout) == tier_times.busy_ticks(stat)  # the Makefile's BUSY_TICKS reads the same fields
    tick = os.sysconf("SC_CLK_TCK")
    cpus = os.cpu_count() or 1
    use = tier_times.cpu_use(1000, 1000 + 30 * tick * cpus, 40.0)
    assert use == {"cpu_seconds": 30.0 * cpus, "cpu_busy": 0.75}
    record = tmp_path / "e2e.json"
    record.write_text('{"tier": "e2e", "seconds": 40.0, "cpu_seconds": 60.0, "cpu_busy": 0.75}')
    assert benchtests.tier_cpu(record) == {"cpu_seconds": 60.0, "cpu_busy": 0.75}
    assert benchtests.tier_cpu(tmp_path / "missing.json") == {}
    record.write_text('{"tier": "e2e", "seconds": 40.0}')  # no /proc/stat where it ran: no figures
    assert benchtests.tier_cpu(record) == {}


def test_the_machine_speed_figures_take_longer_for_more_work(tmp_path):
    """Ten times the process starts or the synced writes take longer; the record names all three figures."""
    assert 0 < benchtests.start_seconds(repeat=1, starts=2) < benchtests.start_seconds(repeat=1, starts=20)
    assert 0 < benchtests.sync_seconds(tmp_path, repeat=1, files=2) < benchtests.sync_seconds(tmp_path, repeat=1,
                                                                                              files=40)
    assert list(tmp_path.iterdir()) == []  # the scratch files are removed
    assert set(benchtests.machine_speed(tmp_path)) == {"python_loop_s", "process_starts_s", "synced_writes_s"}


def test_the_machine_reference_takes_longer_for_more_work():
    """The speed figure is the loop's own time: a tenfold loop takes several times as long."""
    small = benchtests.reference_seconds(repeat=3, loop=200_000)
    large = benchtests.reference_seconds(repeat=1, loop=2_000_000)
    assert 0 < small < large
    assert large > 3 * small
