"""The e2e tests' helpers. The shared clusters (`local_cluster`, `platform`, `namespace`,
`real_platform`) are session fixtures of tests/clusters.py, visible to every test; the helpers for a
module that starts a cluster of its own are there too, and importable from here as before."""

from __future__ import annotations

from clusters import ONE_REAL_NODE, fresh_run_dir, installed, restore, run_first_steps, scratch
from conftest import need_binaries

__all__ = ["ONE_REAL_NODE", "fresh_run_dir", "installed", "need_binaries", "restore", "run_first_steps", "scratch"]
