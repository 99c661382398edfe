"""The chart's monitoring objects as the chart and integration tiers read them: a cached render of the
chart (once per session and argument list), its alert rule groups, and whether Kueue is wired."""

from __future__ import annotations

import functools
import subprocess

from conftest import ROOT
from trainstack import yamlio


def run_tool(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)


def render(*args: str) -> list[dict]:
    """helm template of the chart without CRDs (not needed here), parsed with the C loader: rendered once
    per session and argument list, parsed afresh for each caller."""
    return [d for d in yamlio.load_all(_template(args)) if isinstance(d, dict) and d]


@functools.cache
def _template(args: tuple[str, ...]) -> str:
    from trainstack import helm

    return helm.run(helm.template_args(ROOT / "charts" / "trainstack", *args)).stdout


def rule_groups(docs: list[dict]) -> list[dict]:
    rules = [d for d in docs if d["kind"] == "PrometheusRule"]
    assert len(rules) == 1
    return rules[0]["spec"]["groups"]


def alerts(groups: list[dict]) -> dict[str, dict]:
    return {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}


# Kueue is wired where the chart can install it (the `kueue` dependency, `kueue.install`).
WITH_KUEUE = "kueue" in (yamlio.load((ROOT / "charts" / "trainstack" / "values.yaml").read_text()) or {})
