"""Shared fixtures: run the real CLI, render with the real pinned helm and kustomize."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from trainstack import lock as lockmod
from trainstack import tools

pytest_plugins = ["clusters"]  # the shared clusters (tests/clusters.py)


def run_cli(*args: str, env: dict | None = None, cwd: Path | None = None, input_text: str | None = None,
            timeout: float = 900) -> subprocess.CompletedProcess:
    """Run `trainstack ARGS` as a user would (a separate process, real exit code)."""
    environment = dict(os.environ)
    environment.update(env or {})
    return subprocess.run([sys.executable, "-m", "trainstack", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, env=environment, input=input_text, timeout=timeout)


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    """A user error: non-zero exit, exactly one line on stderr starting 'error:' (after any progress
    lines), no traceback."""
    assert result.returncode != 0, result
    lines = [ln for ln in result.stderr.strip().splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error:")]
    assert len(errors) == 1 and lines[-1] == errors[0], result.stderr
    progress = [ln for ln in lines[:-1] if not ln.startswith(("... ", "  done: ", "OCI chart repositories unreachable"))]
    assert progress == [], result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    for fragment in fragments:
        assert fragment in errors[0], (fragment, errors[0])


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
    from trainstack import helm

    kube = lockmod.load(ROOT / "trainstack.lock.yaml").kubernetes_version
    return helm.run(["template", "trainstack", str(ROOT / "charts" / "trainstack"), "--namespace",
                     "kubeflow-system", "--include-crds", "--kube-version", kube, *args],
                    binary=binary, check=check)


def docs_of(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if isinstance(d, dict) and d]


def by_kind(docs: list[dict], kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d.get("kind") == kind}


@pytest.fixture(scope="session")
def dev_render(chart_ready) -> str:
    result = run_cli("render", "--env", "dev")
    assert result.returncode == 0, result.stderr
    return result.stdout
