"""`trainstack validate` as users run it: exit codes, stdin, usage errors, --env, --kube-version."""

from __future__ import annotations

import json

from trainstack.validate import command


def test_wrong_usage_with_json_output_still_prints_json():
    code, out = command.run(["/no/such/file.yaml", "--output", "json"])
    assert code == 2
    error = json.loads(out)["error"]  # the shape of every subcommand's JSON error (tests/unit/test_cli_convention.py)
    assert "no such file" in error["message"] and error["exit_code"] == 2


def test_the_openapi_source_pins_the_same_kubernetes_as_the_tools(lock):
    source = lock.source("kubernetes-openapi")
    assert source.module == lock.tool("kubernetes").module
    assert source.version == lock.tool("kubernetes").version == lock.kubernetes_version
    assert source.sum.startswith("h1:")


def test_a_folder_without_yaml_or_json_files_is_a_usage_error(tmp_path):
    (tmp_path / "notes.txt").write_text("not a manifest\n")
    (tmp_path / "sub").mkdir()
    code, out = command.run([str(tmp_path), "--output", "json"])
    assert code == 2
    message = json.loads(out)["error"]["message"]
    assert str(tmp_path) in message and "no YAML or JSON files" in message
