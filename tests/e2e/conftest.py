"""The e2e tests' helpers. The shared clusters (`local_cluster`, `platform`, `namespace`,
`real_platform`) are session fixtures of tests/support/clusters.py, visible to every test; the helpers for a
module that starts a cluster of its own are there too, and importable from here as before.

`make test-e2e` runs three pytest processes side by side (tests/support/e2e_tier.py), one per group:
- the real-node group: every module that starts a real node or a sandbox (a network namespace), runs
  `trainstack e2e` or `e2e down`, or checks what such a run leaves on the host (iptables, sysctls,
  network namespaces, cgroups, run folders): one module after another, as in a plain `pytest tests/e2e`;
  the CPU-heavy local-process modules (the torch smoke, the frameworks' local runs) stay beside: moved into
  the real-node groups to even the groups out, they showed no steady gain (docs/decisions.md). Light modules
  do move, where the beside group was the longest (commit 7a222b3), so the e2e failure paths (KWOK clusters,
  `trainstack e2e` stopped at its start) and the SDK's fine-tuning check (no cluster) run here;
- the second real-node group (`-m real_nodes_2`): the modules that declare `REAL_NODE_GROUP = 2`. They
  may start real nodes too, on clusters of their own (each cluster has its own namespaces, cgroups,
  forwarded ports and image stores; images are built one at a time, cluster/imagestore.py,
  images.REGISTRY_LOCK), but never run `e2e down` (it removes kept clusters, which the first group's
  `--keep` test has), so the first group's checks of what a command run leaves (its processes, its
  sandboxes, by its own run folder and cluster name) stay their own: the real platform
  (`test_real_platform`, `test_lifecycle_real`), node loss (`test_node_loss`), the kind provider's e2e
  (`test_e2e_kind`: `trainstack e2e --provider kind`, whose engine, nodes and pods live in a sandbox of
  its own; after a crash it removes only kind's leftovers, and `e2e down --provider kind` after a killed
  run). The timing-bound tests that failed now and then on this 2-core machine with
  three groups at once are made to ride out the load: a host controller that exits at start is started
  again (e2e/hostcontrollers.py), and the teams' Kueue waits longer for PodsReady (e2e/teams_live.py);
- beside them (`-m beside_real_nodes`): the modules that declare `BESIDE_REAL_NODES = True`. They run
  on the host alone (KWOK clusters on ports the OS picks, torch, JAX and XGBoost in local processes,
  the Kubeflow SDK offline) and touch nothing the real-node groups' checks look at.
A shared cluster's users stay in one group (tests/support/clusters.py refuses to collect otherwise):
`local_cluster` is used beside, `real_platform` in the second real-node group. No e2e module uses `platform`, so
the tier starts none (its failing-pods test runs on the integration tier's: tests/integration/test_suite_failure.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import need_binaries
from support.clusters import ONE_REAL_NODE, fresh_run_dir, installed, restore, run_first_steps, scratch

__all__ = ["ONE_REAL_NODE", "fresh_run_dir", "installed", "need_binaries", "restore", "run_first_steps", "scratch"]

BESIDE = "beside_real_nodes"  # the marker (pyproject.toml) of the modules that run beside the real-node ones
SECOND = "real_nodes_2"  # the marker of the second real-node group's modules
HERE = Path(__file__).resolve().parent


def beside(module: object) -> bool:
    """Whether an e2e test module runs beside the real-node modules (it says so: BESIDE_REAL_NODES)."""
    return bool(getattr(module, "BESIDE_REAL_NODES", False))


def group_marker(module: object) -> str | None:
    """The marker of an e2e module's group: BESIDE, SECOND (REAL_NODE_GROUP = 2), or None (the first group)."""
    if beside(module):
        return BESIDE
    return SECOND if getattr(module, "REAL_NODE_GROUP", 1) == 2 else None


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by it
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        marker = group_marker(getattr(item, "module", None)) if Path(item.path).resolve().parent == HERE else None
        if marker:
            item.add_marker(marker)
