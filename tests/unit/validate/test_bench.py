"""`trainstack bench validate` end to end on a small corpus: the results' shape and the peers' agreement."""

from __future__ import annotations


def test_the_scalar_cache_stays_bounded_however_many_unique_values():
    """Memory must not grow with the number of documents: unique names do not pile up in the cache."""
    from trainstack.validate import yamlvalues

    for i in range(yamlvalues._CACHE_MAX * 2 + 5):
        assert yamlvalues.resolve_plain(f"deployment-{i}") == f"deployment-{i}"
        assert len(yamlvalues._cache) <= yamlvalues._CACHE_MAX
    assert yamlvalues.resolve_plain("0x1F") == 31 and yamlvalues.resolve_plain("on") is True
