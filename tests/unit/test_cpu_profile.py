"""tests/support/cpu_profile.py: per-test CPU rows added up per group and module, most CPU first."""

from __future__ import annotations

import json

from support import cpu_profile


def test_rows_add_up_per_group_and_module_most_cpu_first(tmp_path):
    rows = {"alone": [("tests/e2e/test_a.py::one", 10.0, 4.5), ("tests/e2e/test_a.py::two", 5.0, 1.5),
                      ("tests/e2e/test_b.py::one", 3.0, 9.0)],
            "beside": [("tests/e2e/test_c.py::one", 2.0, 2.0)]}
    files = []
    for group, tests in rows.items():
        path = tmp_path / f"{group}.jsonl"
        path.write_text("".join(json.dumps({"test": t, "wall": w, "cpu": c}) + "\n" for t, w, c in tests) + "\n")
        files.append(path)
    data = cpu_profile.summary(files)
    assert data["groups"] == {"alone": {"tests": 3, "wall": 18.0, "cpu": 15.0},
                              "beside": {"tests": 1, "wall": 2.0, "cpu": 2.0}}
    assert data["cpu"] == 17.0
    assert list(data["modules"]) == ["tests/e2e/test_b.py", "tests/e2e/test_a.py", "tests/e2e/test_c.py"]
    assert data["modules"]["tests/e2e/test_a.py"] == {"tests": 2, "wall": 15.0, "cpu": 6.0, "group": "alone"}


def test_the_machine_has_spent_cpu_and_the_count_never_goes_back():
    first = cpu_profile.busy_seconds()
    sum(range(200_000))
    assert 0 < first <= cpu_profile.busy_seconds()
