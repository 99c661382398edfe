"""Shared fixtures: run the real CLI, render with the real pinned helm and kustomize.

Renders are deterministic (tests/chart/test_render.py proves it), so each environment and each
`helm template` argument list is rendered once per session (`render_env`, `helm_template`).
With TRAINSTACK_RECORD_COMMANDS=PATH every external command of the session, the CLI processes'
included, is appended to PATH as one JSON line (trainstack's proc.record_to), to count them.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from support.cli import RECORD_COMMANDS, assert_one_line_error, run_cli  # noqa: F401  (conftest's own use; tests import them from support.cli)
from trainstack import lock as lockmod
from trainstack import tools, yamlio

pytest_plugins = ["support.clusters", "support.team_values"]  # the shared clusters (tests/support/clusters.py); the teams values_file fixture

# The test tiers, one folder each (tests/<tier>/), cheapest first; `make test-<tier>` runs one.
TIERS = ("unit", "chart", "integration", "e2e")


def tier_of(path: Path) -> str | None:
    """The tier of a test file: the first folder under tests/ when it names one."""
    try:
        first = Path(path).resolve().relative_to(ROOT / "tests").parts[0]
    except ValueError:
        return None
    return first if first in TIERS else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test's tier marker comes from its folder, so `-m unit` (or chart, integration, e2e) picks
    one tier; every tier but unit needs built tools, so its tests are also `slow`."""
    for item in items:
        tier = tier_of(item.path)
        if tier is None:
            continue
        item.add_marker(tier)
        if tier != "unit":
            item.add_marker("slow")


def pytest_configure(config: pytest.Config) -> None:
    record = os.environ.get(RECORD_COMMANDS)
    if record:
        from trainstack import proc

        proc.record_to(Path(record).resolve())


@functools.cache
def render_env(env: str) -> subprocess.CompletedProcess:
    """`trainstack render --env ENV`, run once per session and environment (callers check the result)."""
    return run_cli("render", "--env", env)


@functools.cache
def rendered_file(env: str) -> Path:
    """render_env(ENV)'s objects in a file: `validate FILE` judges what `validate --env ENV` would,
    without rendering the environment again."""
    result = render_env(env)
    assert result.returncode == 0, result.stderr
    folder = Path(tempfile.mkdtemp(prefix=f"trainstack-render-{env}-"))
    atexit.register(shutil.rmtree, folder, True)
    path = folder / f"{env}.yaml"
    path.write_text(result.stdout)
    return path


@pytest.fixture(scope="session")
def lock() -> lockmod.Lock:
    return lockmod.load(ROOT / "trainstack.lock.yaml")


def need_binaries(*names: str) -> list[Path]:
    """The pinned binaries NAMES; a missing one fails the test (make test builds them all first)."""
    found = {n: tools.find(n) for n in names}
    missing = [n for n, path in found.items() if path is None]
    if missing:
        pytest.fail(f"not installed: {', '.join(missing)}: run 'make setup' (make test does it for you)")
    return [found[n] for n in names]


def _need(binary: str) -> Path:
    return need_binaries(binary)[0]


@pytest.fixture(scope="session")
def helm_bin() -> Path:
    return _need("helm")


@pytest.fixture(scope="session")
def chart_ready(helm_bin) -> Path:
    from trainstack import deps

    deps.ensure()
    return ROOT / "charts" / "trainstack"


def helm_template(*args: str, binary: str = "helm", check: bool = True) -> subprocess.CompletedProcess:
    """`helm template` of the working tree's chart (CRDs included) with ARGS, once per session and
    argument list; with check, a failure raises (and is not remembered)."""
    return _helm_template(args, binary, check)


@functools.cache
def _helm_template(args: tuple[str, ...], binary: str, check: bool) -> subprocess.CompletedProcess:
    from trainstack import helm

    kube = lockmod.load(ROOT / "trainstack.lock.yaml").kubernetes_version
    return helm.run(helm.template_args(ROOT / "charts" / "trainstack", *args, include_crds=True, kube_version=kube),
                    binary=binary, check=check)


_PARSED: dict[bytes, bytes] = {}
SEPARATOR = re.compile(r"^---[ \t]*$", re.MULTILINE)  # between the documents of a YAML stream


def docs_of(text: str) -> list[dict]:
    """The objects of YAML stream TEXT. Renders are megabytes, most of it CRDs that every render of the
    chart shares: each document's text is parsed once per process and kept pickled, and every caller gets
    objects of its own (pickle.loads is several times cheaper than building them from YAML again)."""
    docs: list[dict] = []
    for chunk in SEPARATOR.split(text):
        key = hashlib.sha256(chunk.encode()).digest()
        if key not in _PARSED:
            _PARSED[key] = pickle.dumps([d for d in yamlio.load_all(chunk) if isinstance(d, dict) and d],
                                        protocol=pickle.HIGHEST_PROTOCOL)
        docs += pickle.loads(_PARSED[key])
    return docs


def by_kind(docs: list[dict], kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d.get("kind") == kind}


@pytest.fixture(scope="session")
def dev_render(chart_ready) -> str:
    result = render_env("dev")
    assert result.returncode == 0, result.stderr
    return result.stdout
