"""The lock is the one place versions live, and everything agrees with it."""

from __future__ import annotations

import re
import tomllib

import yaml

from conftest import ROOT, assert_one_line_error, run_cli


def test_lock_check_passes():
    result = run_cli("lock", "check")
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_image_is_pinned_with_registry_repository_tag_and_digest_field(lock):
    for image in lock.images():
        assert image.registry and image.repository
        assert image.tag not in ("", "latest", "main", "master")
        assert "digest" in lock.data["images"][image.name]


def test_required_pins_are_present(lock):
    assert lock.tool("kubernetes").version.startswith("v1.36.")
    assert lock.tool("etcd").version.startswith("v3.6.")
    assert lock.tool("helm").version.startswith("v4.")
    major, minor = (int(x) for x in lock.tool("helm3").version.lstrip("v").split(".")[:2])
    assert (major, minor) >= (3, 18)
    assert lock.chart("kubeflow-trainer").version == "2.3.0"
    assert lock.chart("jobset").version == "0.12.0"
    for name in ("kind", "kwok", "kustomize", "kubeconform"):
        assert re.match(r"^v\d+\.\d+\.\d+$", lock.tool(name).version)
    assert "kubectl" in lock.tool("kubernetes").packages


def test_pyproject_dependencies_match_the_lock(lock):
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def as_map(requirements):
        return {re.split(r"[<>=!~ ]", r, maxsplit=1)[0]: r[len(re.split(r"[<>=!~ ]", r, maxsplit=1)[0]):]
                for r in requirements}

    python = lock.data["python"]
    assert project["requires-python"] == python["requires-python"]
    assert as_map(project["dependencies"]) == python["dependencies"]
    assert as_map(project["optional-dependencies"]["test"]) == python["test"]
    assert as_map(project["optional-dependencies"]["train"]) == python["train"]


def test_chart_dependencies_match_the_lock(lock):
    chart = yaml.safe_load((ROOT / "charts/trainstack/Chart.yaml").read_text())
    deps = {d["name"]: d for d in chart["dependencies"]}
    for pin in lock.charts():
        assert deps[pin.name]["version"] == pin.version
        assert deps[pin.name]["repository"] == pin.oci


def test_chart_values_use_the_locked_images(lock):
    values = yaml.safe_load((ROOT / "charts/trainstack/values.yaml").read_text())
    trainer = lock.image("trainer-controller-manager")
    image = values["kubeflow-trainer"]["image"]
    assert (image["registry"], image["repository"], image["tag"]) == (trainer.registry, trainer.repository, trainer.tag)
    jobset = lock.image("jobset-controller")
    assert values["jobset"]["image"]["repository"] == f"{jobset.registry}/{jobset.repository}"
    assert values["jobset"]["image"]["tag"] == jobset.tag
    lws = lock.image("lws-controller")
    assert values["lws"]["image"]["manager"]["repository"] == f"{lws.registry}/{lws.repository}"
    assert values["lws"]["image"]["manager"]["tag"] == lws.tag


def test_missing_lock_entry_is_one_clear_line(tmp_path):
    data = yaml.safe_load((ROOT / "trainstack.lock.yaml").read_text())
    del data["tools"]["helm"]["version"]
    broken = tmp_path / "lock.yaml"
    broken.write_text(yaml.safe_dump(data))
    result = run_cli("tools", "list", env={"TRAINSTACK_LOCK": str(broken)})
    assert_one_line_error(result, "missing lock entry 'tools.helm.version'", str(broken))


def test_lock_that_is_not_yaml_is_one_clear_line(tmp_path):
    broken = tmp_path / "lock.yaml"
    broken.write_text("tools: [unclosed\n")
    result = run_cli("lock", "check", env={"TRAINSTACK_LOCK": str(broken)})
    assert_one_line_error(result, str(broken), "not valid YAML")


def test_floating_tag_in_lock_is_reported(tmp_path):
    data = yaml.safe_load((ROOT / "trainstack.lock.yaml").read_text())
    data["images"]["torch"]["tag"] = "latest"
    broken = tmp_path / "lock.yaml"
    broken.write_text(yaml.safe_dump(data))
    result = run_cli("lock", "check", env={"TRAINSTACK_LOCK": str(broken)})
    assert result.returncode == 1
    assert "images.torch.tag 'latest' floats" in result.stdout
