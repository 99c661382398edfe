"""What the Kubeflow SDK ships of the examples travels inside a shell here-document (the SDK writes the
function's source and its arguments into `bash -c`), where a dollar sign, a backquote or a backslash
would be expanded: a backquoted word in a docstring ran as a command in every training pod once. The
functions the SDK ships, the scripts and the tracking helper they carry must hold none."""

from __future__ import annotations

import textwrap

import pytest

from conftest import ROOT

SPECIAL = ("$", "`", "\\")
EXAMPLES = ROOT / "examples"


def function_source(path, name: str) -> str:
    """The text of function NAME in PATH (nested or not): its def line and every deeper-indented line after it."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith(f"def {name}("))
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = next((i for i in range(start + 1, len(lines))
                if lines[i].strip() and len(lines[i]) - len(lines[i].lstrip()) <= indent), len(lines))
    return textwrap.dedent("\n".join(lines[start:end]))


@pytest.mark.parametrize("path", ["sdk_submit.py", "pipelines/trainjob_component.py"])
def test_the_function_the_sdk_ships_holds_no_shell_special_character(path):
    source = function_source(EXAMPLES / path, "run_script")
    assert source.startswith("def run_script(") and "runpy.run_path" in source
    assert [c for c in SPECIAL if c in source] == []


@pytest.mark.parametrize("name", ["train_ddp.py", "train_jax.py", "train_xgboost.py", "trainstack_tracking.py"])
def test_the_scripts_and_their_helper_hold_no_shell_special_character(name):
    assert [c for c in SPECIAL if c in (EXAMPLES / name).read_text()] == []
