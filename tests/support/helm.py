"""Helm against a live cluster, as a user runs it: the chart's refusals happen where Helm can look."""

from __future__ import annotations

from trainstack import api, helm, paths, proc, tools


def error_lines(result) -> list[str]:
    return [ln for ln in (result.stderr + result.stdout).splitlines() if ln.startswith("Error:")]


def dry_run(kubeconfig, *args: str, lock=None):
    """`helm ARGS --dry-run=server` of the working tree's chart against the cluster of KUBECONFIG."""
    cmd = [str(tools.require("helm", lock)), *args, str(paths.chart_dir()), "-n", api.NAMESPACE,
           "--dry-run=server", "--kubeconfig", str(kubeconfig)]
    return proc.run(cmd, check=False, timeout=180, env=helm.env(lock))
