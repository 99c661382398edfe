"""Generated docs (and the values schema) are never stale and every value trainstack owns is documented."""

from __future__ import annotations

from support.cli import run_cli


def test_chart_readme_is_not_stale():
    """The chart README, the docs' runtime and rule tables and values.schema.json match what `trainstack docs` writes."""
    result = run_cli("docs", "--check")
    assert result.returncode == 0, result.stdout


def test_every_owned_value_is_documented():
    from trainstack import chartdocs

    assert chartdocs.undocumented() == []


def test_readme_lists_values_with_defaults():
    from trainstack import chartdocs

    readme = chartdocs.render_readme()
    assert "| `global.imageRegistry` | string |" in readme
    assert "| `dataCache.enabled` | bool | `false` |" in readme
