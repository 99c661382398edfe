"""The integration tier: tests against the session's shared control plane (KWOK nodes, no real
node). Its clusters (`local_cluster`, `platform`, `namespace`) are session fixtures of
tests/support/clusters.py, which tests/conftest.py registers for every tier."""
