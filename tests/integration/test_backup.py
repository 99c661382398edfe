"""`trainstack backup` without a cluster: what a clean manifest keeps and drops, the restore order,
and the one-line errors (the live restore into a fresh cluster is tests/e2e/test_lifecycle.py)."""

from __future__ import annotations

import pytest

from support.cli import run_cli


@pytest.mark.slow  # the pinned kubectl
def test_unreachable_cluster_is_one_line(tmp_path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
        "current-context: x\n")
    result = run_cli("backup", "--kubeconfig", str(kubeconfig), "--out-dir", str(tmp_path / "out"), timeout=120)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot reach the cluster"), result.stderr
    assert not (tmp_path / "out").exists()
