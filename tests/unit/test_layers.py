"""The layer contract (layers.toml) and mypy in `trainstack lint`: each fails on a copy of the package
with one deliberate fault, naming the file, the line and the import (or type) at fault."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from trainstack import lint
from trainstack import lock as lockmod

PACKAGE = Path(lint.__file__).resolve().parent


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """A copy of the package under tmp_path (tmp_path/trainstack): the folder that holds it."""
    shutil.copytree(PACKAGE, tmp_path / "trainstack", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def _append(path: Path, text: str) -> int:
    """Append TEXT as the file's last line; its line number."""
    body = path.read_text().rstrip("\n") + "\n"
    path.write_text(body + text + "\n")
    return body.count("\n") + 1


def _checks(root: Path | None = None) -> dict[str, list[str]]:
    return {c.name: c.problems for c in lint.contract_checks(root)}


def test_the_layers_on_this_tree_have_no_upward_import_into_the_cli():
    """Nothing below the cli layer imports it: features know nothing of the subcommands that call them."""
    found = _checks()
    assert not [p for p in found["layers"] if "imports cli" in p], found["layers"]


def test_an_upward_import_fails_the_contract_naming_file_line_and_modules(copy):
    before = _checks(copy)["layers"]
    line = _append(copy / "trainstack" / "status.py", "from trainstack.e2e import suite  # noqa")
    after = _checks(copy)["layers"]
    new = [p for p in after if p not in before]
    assert new == [(f"trainstack/status.py:{line}: trainstack.status -> trainstack.e2e.suite "
                   "(features imports testbed)")], after


def test_an_import_cycle_is_named(copy):
    before = _checks(copy)["cycles"]
    _append(copy / "trainstack" / "quantity.py", "from trainstack import jsontypes  # noqa")
    line = _append(copy / "trainstack" / "jsontypes.py", "from trainstack import quantity  # noqa")
    found = _checks(copy)
    new = [p for p in found["cycles"] if p not in before]
    assert new == [(f"trainstack/jsontypes.py:{line}: import cycle: trainstack.jsontypes -> trainstack.quantity "
                   "-> trainstack.jsontypes")], found["cycles"]
    assert not [p for p in found["layers"] if "quantity" in p]  # one layer: only the cycle check objects


def test_a_module_in_no_layer_fails_the_contract(copy):
    (copy / "trainstack" / "newthing.py").write_text('"""Placed nowhere yet."""\n')
    line = _append(copy / "trainstack" / "status.py", "from trainstack.e2e import suite  # noqa")
    found = _checks(copy)["layers"]
    assert "layers.toml: trainstack.newthing is in no layer" in found
    assert any(p.startswith(f"trainstack/status.py:{line}: ") for p in found)  # the rest is still checked


def test_a_split_package_init_may_not_import(copy):
    _append(copy / "trainstack" / "e2e" / "__init__.py", "from trainstack import paths  # noqa")
    assert any(p.startswith("trainstack.e2e: a package split across layers imports nothing")
               for p in _checks(copy)["layers"])


def test_mypy_names_the_file_and_line_of_a_type_error(copy):
    module = copy / "trainstack" / "quantity.py"
    lock = lockmod.load()
    assert lint.mypy_check(lock, package_root=copy, files=[module]).problems == []
    line = _append(module, 'x: int = "s"')
    problems = lint.mypy_check(lock, package_root=copy, files=[module]).problems
    assert len(problems) == 1 and problems[0].startswith(f"trainstack/quantity.py:{line}: error: "), problems
    assert "[assignment]" in problems[0]


def test_a_direct_import_of_the_kubernetes_client_outside_kubeapi_fails_the_contract(copy):
    """The kubernetes client is made, retried and watched in kubeapi only ([[only]] in layers.toml):
    an import of it anywhere else, even inside a function, is named with its file and line."""
    before = _checks(copy)["layers"]
    assert not [p for p in before if "kubernetes" in p], before
    line = _append(copy / "trainstack" / "status.py", "from kubernetes import client  # noqa")
    nested = _append(copy / "trainstack" / "e2e" / "suite.py",
                     "def _f():\n    from kubernetes.client.exceptions import ApiException  # noqa") + 1
    after = _checks(copy)["layers"]
    assert [p for p in after if p not in before] == [
        (f"trainstack/e2e/suite.py:{nested}: trainstack.e2e.suite -> kubernetes "
         "(only trainstack.kubeapi imports kubernetes)"),
        f"trainstack/status.py:{line}: trainstack.status -> kubernetes (only trainstack.kubeapi imports kubernetes)",
    ], after
    _append(copy / "trainstack" / "kubeapi.py", "from kubernetes import watch  # noqa")  # its own: allowed
    assert _checks(copy)["layers"] == after
