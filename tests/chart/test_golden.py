"""Each environment renders trainstack's own objects exactly as its golden file says
(tests/chart/golden/ENV.yaml, written by `make generate`): a change to the chart, the values or the
overlays shows up as a reviewed diff of what each environment gets."""

from __future__ import annotations

import difflib

import pytest

from conftest import ROOT, render_env

from . import golden

SHOWN = 200  # diff lines in a failure; the rest is counted


@pytest.mark.parametrize("env", golden.environments())
def test_render_matches_the_golden(chart_ready, env):
    result = render_env(env)
    assert result.returncode == 0, result.stderr
    path = golden.path_of(env)
    shown = path.relative_to(ROOT)
    want = path.read_text() if path.is_file() else ""
    got = golden.text_of(env, result.stdout)
    if got != want:
        diff = list(difflib.unified_diff(want.splitlines(keepends=True), got.splitlines(keepends=True),
                                         f"{shown} (committed)", f"{shown} (rendered now)", n=2))
        more = f"... and {len(diff) - SHOWN} more diff lines\n" if len(diff) > SHOWN else ""
        pytest.fail(f"the {env} render differs from {shown}: run make generate, review the diff and commit it\n"
                    + "".join(diff[:SHOWN]) + more, pytrace=False)


def test_every_environment_has_a_golden_and_nothing_else_does():
    assert sorted(p.stem for p in golden.FOLDER.glob("*.yaml")) == golden.environments(), \
        "run make generate: tests/chart/golden/ has one file per environment"
