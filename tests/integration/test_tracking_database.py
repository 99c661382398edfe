"""`tracking.existingDatabaseSecret` against a live cluster: where Helm can look (install, upgrade,
`--dry-run=server`) the chart refuses, in one line, a Secret that is missing or lacks a key, instead of
a tracking server whose pod waits for it (docs/tracking.md). staging and prod name one."""

from __future__ import annotations

import uuid

import yaml

from support.helm import dry_run, error_lines
from trainstack import api


def upgrade_with(platform, secret: str):
    return dry_run(platform.provider.kubeconfig, "upgrade", "--reuse-values", "--set", "tracking.enabled=true",
                   "--set", f"tracking.existingDatabaseSecret={secret}")


def test_a_missing_database_secret_or_key_is_one_line_and_a_whole_one_renders(platform):
    name = f"tracking-db-{uuid.uuid4().hex[:6]}"
    missing = upgrade_with(platform, name)
    assert missing.returncode != 0 and len(error_lines(missing)) == 1, missing.stderr
    assert f"tracking.existingDatabaseSecret={name}: namespace {api.NAMESPACE} has no Secret {name}" \
        in error_lines(missing)[0], error_lines(missing)
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": api.NAMESPACE},
              "stringData": {"backendStoreUri": "postgresql://mlflow:x@db:5432/mlflow"}}
    platform.kube.kubectl("apply", "-f", "-", input_text=yaml.safe_dump(secret))
    try:
        half = upgrade_with(platform, name)
        assert half.returncode != 0 and len(error_lines(half)) == 1, half.stderr
        assert f"Secret {api.NAMESPACE}/{name} has no key authDatabaseUri" in error_lines(half)[0], error_lines(half)
        secret["stringData"]["authDatabaseUri"] = "postgresql://mlflow:x@db:5432/mlflow_auth"
        platform.kube.kubectl("apply", "-f", "-", input_text=yaml.safe_dump(secret))
        whole = upgrade_with(platform, name)
        assert whole.returncode == 0, whole.stderr
    finally:
        platform.kube.kubectl("delete", "secret", name, "-n", api.NAMESPACE, "--ignore-not-found", check=False)
