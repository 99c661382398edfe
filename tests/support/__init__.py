"""Helpers shared by test tiers (importable as `support.<module>`: tests/ is on sys.path through the root conftest)."""
