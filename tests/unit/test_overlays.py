"""The per-environment overlays: each builds with the pinned tools, `trainstack render` gives the
same objects as plain kustomize, the result validates, and environments differ exactly as
intended (HA, PDBs, enforcement, registry, labels, GPU runtimes, mirror)."""

from __future__ import annotations

from conftest import ROOT
from support.gitops import ENVIRONMENTS
from trainstack import yamlio

HA_ENVS = {"staging", "prod"}


def test_environments_are_the_overlay_folders():
    from trainstack import render

    assert render.environments() == ENVIRONMENTS


def values_of(path: str) -> dict:
    return yamlio.load((ROOT / "overlays" / path).read_text()) or {}


def leaves(values: dict, prefix: tuple = ()) -> dict[tuple, object]:
    """Every leaf of a values tree by its key path (lists are leaves, as Helm replaces them whole)."""
    out: dict[tuple, object] = {}
    for key, value in values.items():
        if isinstance(value, dict) and value:
            out |= leaves(value, (*prefix, key))
        else:
            out[(*prefix, key)] = value
    return out


def test_env_values_files_are_the_kustomizations_list_and_shared_settings_live_once():
    """staging and prod include production.yaml (make generate's copy of overlays/shared/production.yaml,
    kustomize reads nothing outside the folder) before their own values.yaml; dev and cpu-only have only
    their own. No setting is written both in the shared file and in an
    environment's own file: each own file holds only that environment's differences."""
    from trainstack import render

    source = ROOT / "overlays" / "shared" / "production.yaml"
    for env in ENVIRONMENTS:
        own, shared = ROOT / "overlays" / env / "values.yaml", ROOT / "overlays" / env / "production.yaml"
        assert render.values_files(env) == ([shared, own] if env in HA_ENVS else [own]), env
        if env in HA_ENVS:  # the copy is the shared file, byte for byte, under its generated header
            assert shared.read_text().endswith(source.read_text()) and shared.read_text().startswith("# Generated")
        chart = yamlio.load((ROOT / "overlays" / env / "kustomization.yaml").read_text())["helmCharts"][0]
        assert [chart["valuesFile"], *chart.get("additionalValuesFiles", [])][-1] == "values.yaml", env
    common = leaves(values_of("shared/production.yaml"))
    for env in HA_ENVS:
        assert set(leaves(values_of(f"{env}/values.yaml"))) & set(common) == set(), env
