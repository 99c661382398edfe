"""One CLI convention over every subcommand, checked on the real argparse tree (cmdline.py says it):
-o/--output is the format with the same choices, a folder is --out-dir DIR, --env defaults to dev,
wrong usage exits 2 naming the subcommand's own help, and --output json gives the error as data."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from conftest import run_cli
from trainstack import cli, cmdline, commands
from trainstack.errors import USAGE_ERROR
from trainstack.validate import report

TREE = cli.build_parser([], every=True)
LEAVES = {leaf.prog: leaf for leaf in cmdline.leaves(TREE)}
# a format beyond text and json that only validate writes (CI annotations)
EXTRA_FORMATS = {"trainstack validate": tuple(f for f in report.FORMATS if f not in cmdline.OUTPUTS)}


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings]


def test_the_tree_holds_every_subcommand_of_the_table():
    top = next(a for a in TREE._actions if isinstance(a, argparse._SubParsersAction))
    assert list(top.choices) == list(commands.COMMANDS)
    assert len(LEAVES) >= len(commands.COMMANDS)


@pytest.mark.parametrize("prog", sorted(LEAVES))
def test_every_command_has_the_same_output_option(prog):
    (output,) = [a for a in _options(LEAVES[prog]) if "--output" in a.option_strings]
    assert sorted(output.option_strings) == ["--output", "-o"]
    assert tuple(output.choices) == cmdline.OUTPUTS + EXTRA_FORMATS.get(prog, ())
    assert output.default == "text"


@pytest.mark.parametrize("prog", sorted(LEAVES))
def test_a_folder_is_out_dir_and_env_defaults_to_dev(prog):
    for action in _options(LEAVES[prog]):
        names = set(action.option_strings)
        if action.metavar == "DIR" or names & {"--out", "--destination", "--results-dir", "-d"}:
            assert action.option_strings == ["--out-dir"], (prog, action.option_strings)
        if "-o" in names:
            assert "--output" in names, (prog, action.option_strings)
        if "--env" in names:
            assert not action.required, prog
            if isinstance(action, argparse._AppendAction):  # validate: also render each ENV given, none by default
                assert action.default == [], prog
            else:
                assert action.default == cmdline.DEFAULT_ENV, (prog, action.default)


@pytest.mark.parametrize("prog", sorted(LEAVES))
def test_wrong_usage_exits_2_naming_the_subcommands_help(prog, capsys):
    words = prog.split()[1:]
    assert cli.main([*words, "--no-such-flag"]) == USAGE_ERROR
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("error: ") and captured.err.count("\n") == 1, captured.err
    assert captured.err.endswith(f"(see '{prog} --help')\n"), captured.err
    assert "see 'trainstack --help'" not in captured.err


@pytest.mark.parametrize("prog", sorted(LEAVES))
def test_output_json_gives_a_usage_error_as_data(prog, capsys):
    words = prog.split()[1:]
    code = cli.main([*words, "--output", "json", "--no-such-flag"])
    out = capsys.readouterr().out
    error = json.loads(out)["error"]
    assert code == error["exit_code"] == USAGE_ERROR
    assert error["message"] and error["hint"].startswith("see 'trainstack ")


def test_a_failing_command_with_output_json_gives_its_error_as_data():
    result = run_cli("render", "--env", "no-such-env", "-o", "json", timeout=120)
    error = json.loads(result.stdout)["error"]
    assert result.returncode == error["exit_code"] == USAGE_ERROR, result.stderr  # an overlay that is not there
    assert "no-such-env" in error["message"] and "known environments" in error["hint"]
    assert result.stderr.startswith("error: ")


def test_top_level_help_imports_no_command_module():
    code = ("import sys; from trainstack import cli; cli.build_parser(['--help']); "
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('trainstack'))))")
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
                 .stdout.split())
    assert not {m for m in loaded if m.startswith("trainstack.commands.")}, loaded
    assert loaded <= {"trainstack", "trainstack._version", "trainstack.cli", "trainstack.cmdline",
                      "trainstack.commands", "trainstack.errors"}, loaded
