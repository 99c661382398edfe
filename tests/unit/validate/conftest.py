"""Fixtures of the offline validate tests: the schema catalog."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def catalog():
    """The cached schema catalog (built on first use from the pinned module zips and charts)."""
    from trainstack.validate import schemas

    return schemas.load()
