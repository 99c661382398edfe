"""`trainstack e2e` without a cluster: arguments, errors, and the pure parts (node pools, configs, env)."""

from __future__ import annotations

import socket

import pytest

from support.cli import run_cli


@pytest.mark.slow
def test_kind_where_neither_path_can_run_says_so_and_runs_nothing(tmp_path):
    """No Docker engine answers and the private engine cannot run (no apt-get, iptables... on PATH): one line."""
    from trainstack.e2e.providers import docker_answers

    if docker_answers()[0]:
        pytest.skip("a Docker engine answers here: the kind path runs in .github/workflows/e2e-kind.yaml")
    result = run_cli("e2e", "--provider", "kind", env={"PATH": str(tmp_path)})  # (the CLI runs by absolute path)
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert "kind provider: no Docker engine" in last and "no private engine here" in last, last
    assert "nothing was run" in last and "Traceback" not in result.stderr
    with socket.socket() as taken:  # a taken port stops the run right after the provider is chosen
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        auto = run_cli("e2e", "--provider", "auto", "--port-base", str(taken.getsockname()[1]))
    assert "provider local (auto: kind not possible (no Docker engine" in auto.stderr, auto.stderr[-500:]
    assert auto.returncode == 1 and "is already in use" in auto.stderr.strip().splitlines()[-1]
