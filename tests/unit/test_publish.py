"""`trainstack chart publish`: the chart pushed to the pinned OCI registry (CNCF distribution, on
loopback, plain HTTP) with the pinned helm, and installed from there as users install it."""

from __future__ import annotations

from conftest import assert_one_line_error, run_cli


def test_registry_must_be_an_oci_reference():
    result = run_cli("chart", "publish", "--registry", "https://example.invalid/charts")
    assert result.returncode == 2
    assert_one_line_error(result, "--registry", "oci://")
