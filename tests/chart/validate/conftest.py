"""Fixtures of the validate tests of the chart tier: the schema catalog (it reads the chart dependencies' CRDs)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def catalog():
    """The cached schema catalog (built on first use from the pinned module zips and charts)."""
    from trainstack.validate import schemas

    return schemas.load()
