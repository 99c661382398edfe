"""The umbrella chart renders what a platform team relies on, from the pinned dependencies."""

from __future__ import annotations

import pytest

from conftest import by_kind, docs_of, helm_template

pytestmark = pytest.mark.slow

CRDS = {
    "trainjobs.trainer.kubeflow.org", "trainingruntimes.trainer.kubeflow.org",
    "clustertrainingruntimes.trainer.kubeflow.org", "jobsets.jobset.x-k8s.io",
}
LWS_CRD = "leaderworkersets.leaderworkerset.x-k8s.io"


def images(docs):
    found = {}
    for deployment in by_kind(docs, "Deployment").values():
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            found[deployment["metadata"]["name"]] = container["image"]
    return found


def test_dev_render_has_crds_controllers_and_locked_images(dev_render, lock):
    docs = docs_of(dev_render)
    assert CRDS <= set(by_kind(docs, "CustomResourceDefinition"))
    assert LWS_CRD not in by_kind(docs, "CustomResourceDefinition")
    deployed = images(docs)
    assert deployed["kubeflow-trainer-controller-manager"] == lock.image("trainer-controller-manager").reference()
    assert deployed["jobset-controller"] == lock.image("jobset-controller").reference()
    assert not any("lws" in name for name in deployed)


def test_data_cache_brings_lws_crd_and_controller(chart_ready, lock):
    docs = docs_of(helm_template("--set", "dataCache.enabled=true").stdout)
    assert LWS_CRD in by_kind(docs, "CustomResourceDefinition")
    assert images(docs)["lws-controller-manager"] == lock.image("lws-controller").reference()
    assert "kubeflow-trainer-cache-initializer" in by_kind(docs, "ClusterRole")


def test_data_cache_with_lws_already_installed_skips_lws(chart_ready):
    docs = docs_of(helm_template("--set", "dataCache.enabled=true", "--set", "lws.enabled=false").stdout)
    assert LWS_CRD not in by_kind(docs, "CustomResourceDefinition")
    assert not any("lws" in name for name in images(docs))
    assert "kubeflow-trainer-cache-initializer" in by_kind(docs, "ClusterRole")


def test_data_cache_namespaces_get_service_account_and_binding(chart_ready):
    docs = docs_of(helm_template("--set", "dataCache.enabled=true", "--set", "dataCache.namespaces={team-a}").stdout)
    accounts = [d for d in docs if d["kind"] == "ServiceAccount" and d["metadata"].get("namespace") == "team-a"]
    assert [a["metadata"]["name"] for a in accounts] == ["kubeflow-trainer-cache-initializer"]


def test_jobset_can_be_left_to_an_existing_install(chart_ready):
    docs = docs_of(helm_template("--set", "jobset.install=false").stdout)
    assert "jobsets.jobset.x-k8s.io" not in by_kind(docs, "CustomResourceDefinition")
    assert "jobset-controller" not in by_kind(docs, "Deployment")


def test_unknown_top_level_key_fails_and_names_it(chart_ready):
    result = helm_template("--set", "jobsett.install=true", check=False)
    assert result.returncode != 0
    assert "jobsett" in result.stderr


def test_wrong_type_fails_schema(chart_ready):
    result = helm_template("--set", "dataCache.enabled=maybe", check=False)
    assert result.returncode != 0
    assert "dataCache" in result.stderr


def test_runtime_installer_hook_job_is_absent(dev_render):
    docs = docs_of(dev_render)
    assert by_kind(docs, "Job") == {}
    assert not any("runtimes-installer" in d["metadata"]["name"] for d in docs)
    assert not any("helm.sh/hook" in (d["metadata"].get("annotations") or {}) for d in docs)


def test_mirror_registry_without_subchart_images_fails_with_the_values_to_set(chart_ready):
    result = helm_template("--set", "global.imageRegistry=mirror.example.com", check=False)
    assert result.returncode != 0
    assert "kubeflow-trainer.image.registry=mirror.example.com" in result.stderr
    assert "jobset.image.repository=mirror.example.com/jobset/jobset" in result.stderr


def test_mirror_registry_reaches_every_controller_image(chart_ready, lock):
    mirror = "mirror.example.com"
    result = helm_template("--set", f"global.imageRegistry={mirror}",
                           "--set", f"kubeflow-trainer.image.registry={mirror}",
                           "--set", f"jobset.image.repository={mirror}/jobset/jobset")
    for name, image in images(docs_of(result.stdout)).items():
        assert image.startswith(mirror + "/"), (name, image)


def test_chart_also_works_with_helm_v3(chart_ready, lock):
    from trainstack import tools

    if tools.find("helm3") is None:
        pytest.fail("helm3 is not installed: run 'make setup'")
    v3 = docs_of(helm_template(binary="helm3").stdout)
    v4 = docs_of(helm_template().stdout)
    key = lambda d: (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"])
    assert sorted(map(key, v3)) == sorted(map(key, v4))
    assert helm_template("--set", "jobsett.x=1", binary="helm3", check=False).returncode != 0


@pytest.mark.parametrize("binary", ["helm", "helm3"])
def test_the_chart_installs_on_each_end_of_the_supported_range_and_refuses_outside_it(chart_ready, lock, binary):
    """kubeVersion is the tested range (docs/support.md): helm itself refuses a cluster older than the oldest
    or newer than the newest tested minor, naming the range; a provider's build (-eks-...) of a supported
    minor is accepted."""
    oldest, newest = lock.kubernetes_supported
    newer = f"1.{int(newest.split('.')[1]) + 1}"
    older = f"1.{int(oldest.split('.')[1]) - 1}"
    for inside in (f"{oldest}.0", f"v{newest}.9-eks-1a2b3c"):
        result = helm_template("--kube-version", inside, binary=binary, check=False)
        assert result.returncode == 0, (inside, result.stderr)
    for outside in (f"{older}.20", f"{newer}.0"):
        result = helm_template("--kube-version", outside, binary=binary, check=False)
        assert result.returncode != 0
        assert lock.kubernetes_constraint in result.stderr and "incompatible" in result.stderr, result.stderr


def test_the_chart_folder_stands_alone(chart_ready, lock, tmp_path):
    """Everything the chart renders is inside charts/trainstack: no symlink, and a copy of the folder alone
    (no checkout around it, no Python) renders the same objects with stock helm."""
    import shutil
    import subprocess

    from conftest import ROOT
    from trainstack import tools

    chart = ROOT / "charts" / "trainstack"
    links = [str(p.relative_to(chart)) for p in chart.rglob("*") if p.is_symlink()]
    assert links == []
    copy = tmp_path / "trainstack"
    shutil.copytree(chart, copy, symlinks=True)
    from trainstack import helm

    args = helm.template_args(copy, include_crds=True, kube_version=lock.kubernetes_version)
    alone = subprocess.run([str(tools.require("helm")), *args], capture_output=True, text=True, cwd=tmp_path,
                           timeout=300, check=False)
    assert alone.returncode == 0, alone.stderr
    assert alone.stdout == helm_template().stdout
