"""Fixtures of the integration tier: the session's local control plane (KWOK nodes, no real node).

`local_cluster` is defined once, in tests/e2e/conftest.py, and shared from there.
"""

from __future__ import annotations

from e2e.conftest import local_cluster  # noqa: F401  (a fixture: pytest finds it by name)
