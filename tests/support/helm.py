"""Helm against a live cluster, as a user runs it: the chart's refusals happen where Helm can look."""

from __future__ import annotations

from trainstack import helm


def error_lines(result) -> list[str]:
    return [ln for ln in (result.stderr + result.stdout).splitlines() if ln.startswith("Error:")]


def dry_run(kubeconfig, verb: str, *args: str, lock=None):
    """`helm VERB` (install, upgrade) of the release with the working tree's chart and ARGS, as a server-side
    dry run against the cluster of KUBECONFIG."""
    release = helm.Release(kubeconfig, lock=lock)
    return release.run(release.dry_run(verb, None, *args), check=False, timeout=180)
