"""`trainstack render`: deterministic output, clear errors, nothing of the user's overwritten."""

from __future__ import annotations

import shutil

import yaml

from conftest import ROOT
from support.cli import assert_one_line_error, run_cli


def test_unknown_env_is_one_clear_line():
    result = run_cli("render", "--env", "nope")
    assert_one_line_error(result, "unknown environment 'nope'", "dev")
    assert result.returncode == 2


# ----------------------------------------------------------------------------- an environment's values files
def _checkout(tmp_path, kustomization: dict, files: dict[str, str]):
    """A checkout with only the lock, the chart (linked) and overlays/x: kustomization and files."""
    root = tmp_path / "checkout"
    (root / "overlays" / "x").mkdir(parents=True)
    shutil.copy(ROOT / "trainstack.lock.yaml", root / "trainstack.lock.yaml")
    (root / "charts").symlink_to(ROOT / "charts")
    (root / "overlays" / "x" / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    for name, text in files.items():
        (root / "overlays" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "overlays" / name).write_text(text)
    return root


def _kustomization(values_file: str, *additional: str) -> dict:
    chart = {"name": "trainstack", "releaseName": "trainstack", "namespace": "kubeflow-system", "includeCRDs": True,
             "valuesFile": values_file}
    if additional:
        chart["additionalValuesFiles"] = list(additional)
    return {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "components": ["../base"],
            "helmCharts": [chart]}


def test_env_values_files_are_read_from_the_kustomization_in_order(tmp_path):
    from trainstack import render

    root = _checkout(tmp_path, _kustomization("../shared/a.yaml", "values.yaml", "more.yaml"), {
        "shared/a.yaml": "x: {keep: 1, over: 1, drop: 1}\nlist: [1, 2]\n",
        "x/values.yaml": "x: {over: 2, drop: null}\nlist: [3]\n",
        "x/more.yaml": "y: 1\n",
    })
    overlay = root / "overlays" / "x"
    want = [root / "overlays" / "shared" / "a.yaml", overlay / "values.yaml", overlay / "more.yaml"]
    assert render.values_files("x", root=root) == [p.resolve() for p in want]
    assert render.value_args("x", root=root) == [a for p in want for a in ("-f", str(p.resolve()))]
    # Helm's merge: a later file wins, maps merge, lists are replaced, null removes the key
    assert render.env_values("x", root=root) == {"x": {"keep": 1, "over": 2}, "list": [3], "y": 1}


def test_a_missing_values_file_is_one_line_naming_the_kustomization(tmp_path):
    root = _checkout(tmp_path, _kustomization("a.yaml", "values.yaml"), {"x/values.yaml": "{}\n"})
    result = run_cli("render", "--env", "x", env={"TRAINSTACK_ROOT": str(root)})
    assert_one_line_error(result, "overlays/x/kustomization.yaml: helmCharts[0].valuesFile: a.yaml not found")
    assert result.returncode == 2
    # a file of overlays/shared/ named by its path: kustomize (and Argo CD's) refuses it; one line saying so
    shared = _checkout(tmp_path / "1", _kustomization("../shared/a.yaml", "values.yaml"),
                       {"x/values.yaml": "{}\n", "shared/a.yaml": "{}\n"})
    result = run_cli("render", "--env", "x", env={"TRAINSTACK_ROOT": str(shared)})
    assert_one_line_error(result, "overlays/x/kustomization.yaml: helmCharts[0].valuesFile: ../shared/a.yaml is "
                                  "outside the overlay's folder")
    assert result.returncode == 2
    outside = _checkout(tmp_path / "2", _kustomization("values.yaml", "../../../elsewhere.yaml"),
                        {"x/values.yaml": "{}\n"})
    (tmp_path / "2" / "elsewhere.yaml").write_text("{}\n")
    result = run_cli("render", "--env", "x", env={"TRAINSTACK_ROOT": str(outside)})
    assert_one_line_error(result, "overlays/x/kustomization.yaml: helmCharts[0].additionalValuesFiles[0]: "
                                  "../../../elsewhere.yaml is outside the repository")


def test_values_args_prints_helms_f_list_of_an_environment():
    """What docs/upgrading.md's `helm upgrade ... $(trainstack render --env ENV --values-args)` gets."""
    from trainstack import render

    for env in ("dev", "prod"):
        result = run_cli("render", "--env", env, "--values-args")
        assert result.returncode == 0, result.stderr
        words = result.stdout.split()
        assert words[::2] == ["-f"] * len(words[1::2])
        assert [ROOT / w for w in words[1::2]] == render.values_files(env)
    assert run_cli("render", "--env", "prod", "--values-args").stdout.split()[1] == "overlays/prod/production.yaml"
