"""The chart's `helm test` hook (templates/platform-test/): hooks only, restricted, the image from the
lock through the mirror, and what it checks is what each environment's platform must admit and deny
(checked offline here with the environment's own policies; the e2e runs the hook on the cluster)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, by_kind, docs_of, rendered_file
from support.gitops import ENVIRONMENTS, rendered

pytestmark = pytest.mark.slow

NAME = "trainstack-platform-test"


def hook(*args: str, check: bool = True):
    """`helm template` of the chart with its test hook (the one command line, tests included)."""
    from trainstack import helm, lock

    line = helm.template_args(None, *args, include_tests=True, kube_version=lock.load().kubernetes_version)
    return helm.run(line, check=check)


def spec_of(docs: list[dict]) -> dict:
    return json.loads(by_kind(docs, "ConfigMap")[NAME]["data"]["spec.json"])


def test_every_object_is_a_test_hook_and_helm_install_renders_none(chart_ready, lock):
    from trainstack import helm

    docs = [d for d in docs_of(hook().stdout) if NAME in d["metadata"]["name"]]
    assert {d["kind"] for d in docs} == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
                                          "ConfigMap", "Pod"}
    assert all(d["metadata"]["annotations"]["helm.sh/hook"] == "test" for d in docs)
    # the pod stays after a pass for `helm test --logs`; its RBAC and ConfigMap go
    pod = by_kind(docs, "Pod")[NAME]
    assert pod["metadata"]["annotations"]["helm.sh/hook-delete-policy"] == "before-hook-creation"
    assert all("hook-succeeded" in d["metadata"]["annotations"]["helm.sh/hook-delete-policy"]
               for d in docs if d["kind"] != "Pod")
    # what `helm install` creates (and every other render of the chart) has none of it
    installed = helm.run(helm.template_args(None, kube_version=lock.kubernetes_version)).stdout
    assert NAME not in installed


def test_the_pod_runs_the_locks_python_image_restricted_with_least_privilege(chart_ready, lock):
    docs = docs_of(hook().stdout)
    pod = by_kind(docs, "Pod")[NAME]["spec"]
    [container] = pod["containers"]
    assert container["image"] == lock.image("python").reference()
    assert container["command"] == ["python3", "/platform-test/check.py"]
    assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                            "capabilities": {"drop": ["ALL"]}}
    rules = by_kind(docs, "ClusterRole")[NAME]["rules"] + by_kind(docs, "Role")[NAME]["rules"]
    assert sorted((r["resources"][0], tuple(r["verbs"])) for r in rules) == [
        ("clustertrainingruntimes", ("get", "list")), ("trainjobs", ("create",))]
    script = by_kind(docs, "ConfigMap")[NAME]["data"]["check.py"]
    assert script == (ROOT / "charts" / "trainstack" / "files" / "platform-test" / "check.py").read_text()
    mirror = ("--set", "global.imageRegistry=mirror.example.com", "--set", "kubeflow-trainer.image.registry=mirror.example.com",
              "--set", "jobset.image.repository=mirror.example.com/jobset/jobset")
    mirrored = by_kind(docs_of(hook(*mirror).stdout), "Pod")[NAME]
    assert mirrored["spec"]["containers"][0]["image"] == f"mirror.example.com/library/python:{lock.image('python').tag}"


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_what_the_hook_expects_is_what_the_environments_policies_do(env, chart_ready, tmp_path):
    """The TrainJob the hook must see admitted passes the environment's own policies (offline, trainstack
    validate), and the one it must see refused is denied by the image-tag rule; the runtimes it lists are
    the environment's golden runtimes."""
    from trainstack import render
    from trainstack.validate import command as validate

    spec = spec_of(docs_of(hook(*render.value_args(env)).stdout))
    runtimes = {d["metadata"]["name"] for d in rendered(env) if d["kind"] == "ClusterTrainingRuntime"}
    assert set(spec["runtimes"]) == runtimes
    assert spec["admitted"]["spec"]["runtimeRef"]["name"] in runtimes
    files = {key: str(tmp_path / f"{key}.yaml") for key in ("admitted", "refused")}
    for key, path in files.items():
        Path(path).write_text(yaml.safe_dump(spec[key]))
    # the environment's render (as `validate --env ENV` renders it) and the two TrainJobs, judged in one run
    code, out = validate.run([str(rendered_file(env)), *files.values(), "--policies", "--output", "json"])
    findings = json.loads(out)["findings"]
    errors = {key: [f for f in findings if f["file"] == path and f["severity"] == "error"] for key, path in files.items()}
    assert errors["admitted"] == [], errors["admitted"]
    assert spec["deny"] is True and spec["refusedBy"] == "trainstack-image-tag"
    assert code != 0 and "trainstack-image-tag" in json.dumps(errors["refused"]), errors["refused"]
    assert not [f for f in findings if f["file"] not in files.values() and f["severity"] == "error"], code


def test_a_rule_that_only_warns_is_expected_to_warn_and_one_that_is_off_is_not_checked(chart_ready):
    warn = spec_of(docs_of(hook("--set", "policies.rules.imageTag.validationActions={Warn}").stdout))
    assert warn["deny"] is False and warn["refused"]["spec"]["trainer"]["image"].endswith(":latest")
    off = spec_of(docs_of(hook("--set", "policies.rules.imageTag.enabled=false").stdout))
    assert "refused" not in off and off["admitted"]


def test_the_hook_can_be_turned_off_and_a_wrong_runtime_is_named(chart_ready):
    assert NAME not in hook("--set", "tests.enabled=false").stdout
    result = hook("--set", "tests.runtime=nope", check=False)
    assert result.returncode != 0
    assert "tests.runtime: nope is not a golden runtime of this release" in result.stderr
