"""`trainstack bench validate` end to end on a small corpus: the results' shape and the peers' agreement."""

from __future__ import annotations


def test_the_scalar_cache_stays_bounded_however_many_unique_values():
    """Memory must not grow with the number of documents: unique names do not pile up in the cache."""
    from trainstack.validate import documents

    for i in range(documents._CACHE_MAX * 2 + 5):
        assert documents.resolve_plain(f"deployment-{i}") == f"deployment-{i}"
        assert len(documents._cache) <= documents._CACHE_MAX
    assert documents.resolve_plain("0x1F") == 31 and documents.resolve_plain("on") is True
