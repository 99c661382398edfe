"""jsontypes.dig: what the `((obj.get(a) or {}).get(b) or {}).get(c, default)` chains it replaced gave."""

from __future__ import annotations

import pytest

from trainstack.jsontypes import dig


def chain(obj, a, b, c, default=None):
    return ((obj.get(a) or {}).get(b) or {}).get(c, default)


@pytest.mark.parametrize("obj", [
    {},
    {"status": None},
    {"status": {}},
    {"status": {"sync": None}},
    {"status": {"sync": {}}},
    {"status": {"sync": {"status": None}}},  # present and null: null, not the default
    {"status": {"sync": {"status": "Synced"}}},
    {"status": {"sync": {"status": ""}}},
    {"status": ""},
    {"status": []},
])
def test_dig_gives_what_the_chain_gave(obj):
    for default in (None, "", "?", 0):
        assert dig(obj, "status", "sync", "status", default=default) == chain(obj, "status", "sync", "status", default)


def test_dig_takes_a_missing_or_odd_object_and_step_as_missing():
    assert dig(None, "metadata", "name") is None
    assert dig({"metadata": ["not", "a", "map"]}, "metadata", "name", default="?") == "?"
    assert dig({"data": {"k": "v"}}, "data", "k") == "v"
    assert dig({"data": {"k": "v"}}, "data") == {"k": "v"}
