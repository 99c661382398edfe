"""overlays/argocd: the AppProject, ApplicationSet and Argo CD install Component are
valid for the pinned Argo CD, render with Argo CD as it ships (no plugin), permit exactly what the environments render, and the TrainJob and
JobSet health checks give the right status when run by a real Lua 5.1 interpreter."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, by_kind, docs_of, helm_template
from support.cli import run_cli
from support.gitops import (
    ENVIRONMENTS,
    argocd_crds,
    argocd_file,
    argocd_validator,
    canonical,
    cluster_scoped,
    crd_validator,
    group_kind,
    plain_kustomize,
    rendered,
    schema_errors,
)
from support.health_samples import JOBSET_CASES, TRAINJOB_CASES
from trainstack import yamlio

ARGOCD = ROOT / "overlays" / "argocd"
HEALTH = ARGOCD / "install" / "health"
HEALTH_KEYS = {
    "resource.customizations.health.trainer.kubeflow.org_TrainJob": HEALTH / "trainjob.lua",
    "resource.customizations.health.jobset.x-k8s.io_JobSet": HEALTH / "jobset.lua",
}
CERT_SECRETS = {"kubeflow-trainer-webhook-cert", "jobset-webhook-server-cert", "lws-webhook-server-cert"}
FAKE_CLUSTER = {"name": "arn:aws:eks:eu-west-1:1:cluster/gpu-a", "nameNormalized": "arn-aws-eks-eu-west-1-1-cluster-gpu-a",
                "server": "https://gpu-a.example.com"}


def kustomize(path: Path) -> list[dict]:
    from trainstack import tools

    result = subprocess.run([str(tools.require("kustomize")), "build", str(path)], capture_output=True, text=True,
                            timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    return docs_of(result.stdout)


@pytest.fixture(scope="module")
def argocd_objects() -> list[dict]:
    return kustomize(ARGOCD)


def one(docs: list[dict], kind: str) -> dict:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, (kind, found)
    return found[0]


def fill(text: str, params: dict) -> str:
    """Go template `{{.param}}` fields, the only template syntax applicationset.yaml uses."""
    return re.sub(r"\{\{\.(\w+)\}\}", lambda m: str(params[m.group(1)]), text)


def generated_applications(appset: dict, cluster: dict) -> list[dict]:
    """What the ApplicationSet controller makes for one cluster: the list × clusters matrix."""
    matrix = appset["spec"]["generators"][0]["matrix"]["generators"]
    elements, selector = matrix[0]["list"]["elements"], matrix[1]["clusters"]["selector"]["matchLabels"]
    apps = []
    for element in elements:
        params = {**element, **cluster}
        if any(cluster["labels"].get(k) != fill(v, params) for k, v in selector.items()):
            continue
        text = fill(json.dumps(appset["spec"]["template"]), params)
        assert "{{" not in text, text
        apps.append({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", **json.loads(text)})
    return apps


# ----------------------------------------------------------------------------- Argo CD schemas
@pytest.mark.slow
def test_argocd_objects_validate_against_the_pinned_argocd_crds(argocd_objects):
    checked = []
    for doc in argocd_objects:
        if doc["kind"] in argocd_crds():
            assert schema_errors(argocd_validator(doc["kind"]), doc) == [], doc["kind"]
            checked.append(doc["kind"])
    assert sorted(checked) == ["AppProject", "ApplicationSet"]
    appset = one(argocd_objects, "ApplicationSet")
    for env in ENVIRONMENTS:
        cluster = {**FAKE_CLUSTER, "labels": {"trainstack.io/environment": env}}
        [app] = generated_applications(appset, cluster)
        assert schema_errors(argocd_validator("Application"), app) == [], env


@pytest.mark.slow
def test_the_schema_check_rejects_what_argocd_would_reject(argocd_objects):
    """The check is strict: a misspelt field or a wrong type is an error, as for the API server."""
    validator = argocd_validator("AppProject")
    project = json.loads(json.dumps(one(argocd_objects, "AppProject")))
    project["spec"]["clusterResourceWhitelists"] = project["spec"].pop("clusterResourceWhitelist")
    assert any("clusterResourceWhitelists" in e for e in schema_errors(validator, project))
    project = json.loads(json.dumps(one(argocd_objects, "AppProject")))
    project["spec"]["destinations"] = "kubeflow-system"
    assert schema_errors(validator, project)
    appset = json.loads(json.dumps(one(argocd_objects, "ApplicationSet")))
    appset["spec"]["template"]["spec"]["syncPolicy"]["syncOption"] = ["ServerSideApply=true"]
    assert any("syncOption" in e for e in schema_errors(argocd_validator("ApplicationSet"), appset))


@pytest.mark.slow
def test_argocd_objects_and_install_component_pass_trainstack_validate(argocd_objects, installed, tmp_path):
    changed = [installed["argocd-cm"], installed["argocd-repo-server"]]
    path = tmp_path / "argocd.yaml"
    path.write_text("".join("---\n" + yaml.safe_dump(d) for d in [*argocd_objects, *changed]))
    result = run_cli("validate", str(path), "--output", "json")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert json.loads(result.stdout)["summary"]["errors"] == 0


# ----------------------------------------------------------------------------- ApplicationSet
@pytest.mark.slow
def test_one_application_per_environment_and_labelled_cluster(argocd_objects):
    from trainstack import render

    appset = one(argocd_objects, "ApplicationSet")
    project = one(argocd_objects, "AppProject")
    elements = appset["spec"]["generators"][0]["matrix"]["generators"][0]["list"]["elements"]
    assert sorted(e["env"] for e in elements) == render.environments()
    assert generated_applications(appset, {**FAKE_CLUSTER, "labels": {"team": "x"}}) == []
    names = set()
    for env in ENVIRONMENTS:
        [app] = generated_applications(appset, {**FAKE_CLUSTER, "labels": {"trainstack.io/environment": env}})
        spec = app["spec"]
        names.add(app["metadata"]["name"])
        assert spec["project"] == project["metadata"]["name"]
        assert spec["source"]["repoURL"] in project["spec"]["sourceRepos"]
        assert (ROOT / spec["source"]["path"] / "kustomization.yaml").is_file()
        # plain kustomize of the environment's folder: Argo CD's own, no plugin
        assert set(spec["source"]) == {"repoURL", "targetRevision", "path"}, spec["source"]
        assert spec["source"]["path"] == f"overlays/{env}"
        assert spec["destination"] == {"server": FAKE_CLUSTER["server"], "namespace": "kubeflow-system"}
        assert app["metadata"]["labels"]["trainstack.io/environment"] == env
    assert len(names) == len(ENVIRONMENTS)
    assert appset["spec"]["syncPolicy"]["preserveResourcesOnDeletion"] is True


@pytest.mark.slow
def test_sync_options_and_ignored_differences_cover_what_controllers_own(argocd_objects):
    template = one(argocd_objects, "ApplicationSet")["spec"]["template"]["spec"]
    options = set(template["syncPolicy"]["syncOptions"])
    assert {"ServerSideApply=true", "RespectIgnoreDifferences=true"} <= options
    ignored = template["ignoreDifferences"]
    webhooks = {d["kind"]: d["jqPathExpressions"] for d in ignored if d.get("group") == "admissionregistration.k8s.io"}
    assert webhooks == {k: [".webhooks[]?.clientConfig.caBundle"]
                        for k in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")}
    secrets = {d["name"]: d for d in ignored if d["kind"] == "Secret"}
    assert set(secrets) == CERT_SECRETS
    assert all(s["jsonPointers"] == ["/data"] and s["namespace"] == "kubeflow-system" for s in secrets.values())


@pytest.mark.slow
def test_ignored_secrets_and_webhooks_are_the_ones_the_charts_render(chart_ready):
    """The names in ignoreDifferences are real: the renders (and the data cache's LWS) have them."""
    for env in ENVIRONMENTS:
        docs = list(rendered(env))
        assert {"kubeflow-trainer-webhook-cert", "jobset-webhook-server-cert"} <= set(by_kind(docs, "Secret"))
        for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            for webhook in by_kind(docs, kind).values():
                assert all("clientConfig" in w for w in webhook["webhooks"])
    with_cache = docs_of(helm_template("--set", "dataCache.enabled=true").stdout)
    assert "lws-webhook-server-cert" in by_kind(with_cache, "Secret")


# ----------------------------------------------------------------------------- AppProject
@pytest.mark.slow
def test_appproject_whitelists_exactly_the_kinds_the_environments_render(argocd_objects):
    project = one(argocd_objects, "AppProject")["spec"]
    cluster, namespaced = set(), set()
    for env in ENVIRONMENTS:
        scoped = cluster_scoped(env)
        for doc in rendered(env):
            (cluster if group_kind(doc) in scoped else namespaced).add(group_kind(doc))
    assert {(i["group"], i["kind"]) for i in project["clusterResourceWhitelist"]} == cluster
    assert {(i["group"], i["kind"]) for i in project["namespaceResourceWhitelist"]} == namespaced
    assert len(project["clusterResourceWhitelist"]) == len(cluster)
    assert len(project["namespaceResourceWhitelist"]) == len(namespaced)


@pytest.mark.slow
def test_every_rendered_object_is_permitted_by_the_project(argocd_objects):
    """Argo CD's own rule (validateSyncPermissions): the group/kind is whitelisted and a
    namespaced object's namespace is a destination of the project."""
    project = one(argocd_objects, "AppProject")["spec"]
    allowed = {(i["group"], i["kind"]) for i in project["clusterResourceWhitelist"] + project["namespaceResourceWhitelist"]}
    import fnmatch

    patterns = {d["namespace"] for d in project["destinations"]}
    assert patterns == {"kubeflow-system", "team-*"}
    for env in ENVIRONMENTS:
        for doc in rendered(env):
            assert group_kind(doc) in allowed, (env, doc["kind"])
            if group_kind(doc) not in cluster_scoped(env):
                namespace = doc["metadata"]["namespace"]
                assert any(fnmatch.fnmatchcase(namespace, p) for p in patterns), (env, doc["kind"], doc["metadata"]["name"])


# ----------------------------------------------------------------------------- what Argo CD renders
def checkout_copy(dest: Path, only: list[str] | None = None) -> Path:
    """The files a git checkout of this working tree has (tracked and not ignored), symlinks kept;
    with ONLY, just those under one of these repository paths."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split("\0")
    for rel in filter(None, listed):
        if only is not None and not any(rel == p or rel.startswith(p.rstrip("/") + "/") for p in only):
            continue
        src, target = ROOT / rel, dest / rel
        if not os.path.lexists(src):
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            target.symlink_to(os.readlink(src))
        else:
            shutil.copy2(src, target)
    return dest


def generate_paths(app: dict) -> list[str]:
    """The repository paths of an Application's manifest-generate-paths, resolved as Argo CD does
    (util/app/path GetSourceRefreshPaths: absolute from the root, else under the source path)."""
    value = app["metadata"]["annotations"]["argocd.argoproj.io/manifest-generate-paths"]
    out = []
    for item in filter(None, (i.strip() for i in value.split(";"))):
        out.append(item[1:] if item.startswith("/") else os.path.normpath(os.path.join(app["spec"]["source"]["path"], item)))
    return out


def test_a_commit_outside_the_render_inputs_reuses_the_manifests(argocd_objects):
    """Teams' TrainJobs, docs and tests committed to the same repository do not make Argo CD
    render the platform again (the render below proves the paths are enough)."""
    appset = one(argocd_objects, "ApplicationSet")
    for env in ENVIRONMENTS:
        app = generated_applications(appset, {**FAKE_CLUSTER, "labels": {"trainstack.io/environment": env}})[0]
        paths = generate_paths(app)
        assert paths[0] == f"overlays/{env}", paths
        for path in paths:
            assert (ROOT / path).exists(), f"manifest-generate-paths names {path}, which does not exist"
        for outside in ("examples/sdk_submit.py", "docs/gitops.md", "tests/test_argocd.py", "e2e/gitops/jobs/x.yaml"):
            assert not any(outside == p or outside.startswith(p + "/") for p in paths), (env, outside)


@pytest.mark.slow
def test_stock_kustomize_renders_an_environment_from_its_generate_paths_alone(chart_ready, lock, tmp_path):
    """Argo CD's repo-server as it ships: its kustomize, on a checkout holding only what the Application's
    manifest-generate-paths name (Argo CD reuses its cached manifests for a commit that changes nothing
    there, so the render must need nothing else), with the published chart pulled where `helm pull --untar`
    puts it, prints what render prints. No trainstack code, no built dependencies, no --load-restrictor."""
    appset = one(kustomize(ARGOCD), "ApplicationSet")
    app = next(a for a in generated_applications(appset, {**FAKE_CLUSTER, "labels": {"trainstack.io/environment": "prod"}}))
    paths = generate_paths(app)
    assert "overlays/prod" in paths and "examples" not in paths and "scripts" not in paths, paths
    repo = checkout_copy(tmp_path / "repo", only=paths)
    assert not (repo / "charts").exists() and not (repo / "scripts").exists()
    assert canonical(plain_kustomize(repo, "prod", lock)) == canonical(rendered("prod"))


# ----------------------------------------------------------------------------- install Component
@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, dict]:
    """The install Component applied to the pinned Argo CD's own manifests/install.yaml."""
    work = tmp_path_factory.mktemp("argocd-install")
    (work / "install.yaml").write_text(argocd_file("manifests/install.yaml"))
    component = os.path.relpath(ARGOCD / "install", work)
    (work / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "namespace": "argocd",
        "resources": ["install.yaml"], "components": [component]}))
    docs = kustomize(work)
    return {"argocd-cm": by_kind(docs, "ConfigMap")["argocd-cm"],
            "argocd-repo-server": by_kind(docs, "Deployment")["argocd-repo-server"]}


@pytest.mark.slow
def test_install_component_merges_health_checks_into_argocd_cm(installed):
    data = installed["argocd-cm"]["data"]
    for key, path in HEALTH_KEYS.items():
        assert data[key] == path.read_text(), key
    assert data["kustomize.buildOptions"] == "--enable-helm"
    assert installed["argocd-cm"]["metadata"]["labels"]["app.kubernetes.io/part-of"] == "argocd"
    # what the install Component adds to argocd-cm: the two health checks and kustomize's --enable-helm
    shipped = by_kind(docs_of(argocd_file("manifests/install.yaml")), "ConfigMap")["argocd-cm"].get("data") or {}
    assert set(data) - set(shipped) == {*HEALTH_KEYS, "kustomize.buildOptions"}


@pytest.mark.slow
def test_install_component_leaves_the_repo_server_as_argocd_ships_it(installed):
    """No sidecar, no plugin volume, no image of ours: the repo-server Deployment of Argo CD's install.yaml."""
    shipped = by_kind(docs_of(argocd_file("manifests/install.yaml")), "Deployment")["argocd-repo-server"]
    shipped["metadata"]["namespace"] = "argocd"
    assert installed["argocd-repo-server"] == shipped


@pytest.mark.slow
def test_health_samples_are_valid_trainjobs_and_jobsets(chart_ready):
    """The sample objects follow the pinned CRDs (status included), so the scripts read real fields."""
    trainjobs = yamlio.load((chart_ready / "crds" / "trainjobs.trainer.kubeflow.org.yaml").read_text())
    archive = next((chart_ready / "charts").glob("jobset-*.tgz"))
    with tarfile.open(archive) as tar:
        member = next(m for m in tar.getmembers() if m.name.startswith("jobset/crds/") and m.isfile())
        jobsets = yamlio.load(tar.extractfile(member).read())
    for crd, cases in ((trainjobs, TRAINJOB_CASES), (jobsets, JOBSET_CASES)):
        validator = crd_validator(crd)
        for case, (obj, _, _) in cases.items():
            assert schema_errors(validator, obj) == [], (crd["spec"]["names"]["kind"], case)
