"""Clusters trainstack starts itself (the local control plane used by e2e and tests)."""
