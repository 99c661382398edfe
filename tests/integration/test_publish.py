"""`trainstack chart publish`: the chart pushed to the pinned OCI registry (CNCF distribution, on
loopback, plain HTTP) with the pinned helm, and installed from there as users install it."""

from __future__ import annotations

import hashlib
import json
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, _need
from support.cli import assert_one_line_error, run_cli
from support.signing import gpg_home
from trainstack import helm, render, yamlio
from trainstack.cluster.local import free_port
from trainstack.cluster.node import registry_config

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def registry(tmp_path_factory, chart_ready) -> Iterator[str]:
    """The pinned registry on a free 127.0.0.1 port; its address as HOST:PORT."""
    binary = _need("registry")
    work = tmp_path_factory.mktemp("registry")
    port = free_port()
    (work / "config.yaml").write_text(yaml.safe_dump(registry_config(work / "data", f"127.0.0.1:{port}")))
    with (work / "registry.log").open("w") as log:
        proc = subprocess.Popen([str(binary), "serve", str(work / "config.yaml")], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, (work / "registry.log").read_text()
                time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _publish(registry: str, path: str, *extra: str, root: Path = ROOT) -> subprocess.CompletedProcess:
    """`trainstack chart publish` of the checkout at root to oci://REGISTRY/PATH (each test its own path)."""
    return run_cli("chart", "publish", "--registry", f"oci://{registry}/{path}", "--plain-http", *extra,
                   env={"TRAINSTACK_ROOT": str(root)})


def _chart_version() -> str:
    return str(yamlio.load((ROOT / "charts" / "trainstack" / "Chart.yaml").read_text())["version"])


def _template(chart: str, *args: str) -> str:
    return helm.run(["template", "trainstack", chart, "--namespace", "kubeflow-system", "--include-crds",
                     *render.value_args("prod"), *args]).stdout


def _checkout_copy(tmp: Path) -> Path:
    """A checkout with only what publishing reads: the lock and the chart (symlinks resolved)."""
    root = tmp / "checkout"
    (root / "charts").mkdir(parents=True)
    shutil.copy(ROOT / "trainstack.lock.yaml", root / "trainstack.lock.yaml")
    shutil.copytree(ROOT / "charts" / "trainstack", root / "charts" / "trainstack", symlinks=False)
    return root


def test_published_chart_installs_from_the_registry_byte_identical_to_the_local_chart(registry, tmp_path):
    result = _publish(registry, "charts", "--output", "json")
    assert result.returncode == 0, result.stderr
    published = json.loads(result.stdout)
    version = _chart_version()
    assert published["version"] == version and published["action"] in ("pushed", "already published")
    assert published["reference"] == f"oci://{registry}/charts/trainstack"
    # what the registry serves is the archive (its layer digest), and it holds the dependencies and CRDs
    helm.run(["pull", published["reference"], "--version", version, "--plain-http", "-d", str(tmp_path)])
    archive = tmp_path / f"trainstack-{version}.tgz"
    assert "sha256:" + hashlib.sha256(archive.read_bytes()).hexdigest() == published["digest"]
    listing = subprocess.run(["tar", "tzf", str(archive)], capture_output=True, text=True, check=True).stdout
    for member in ("trainstack/charts/kubeflow-trainer/Chart.yaml", "trainstack/charts/jobset/Chart.yaml",
                   "trainstack/crds/trainjobs.trainer.kubeflow.org.yaml",
                   "trainstack/files/runtimes/", "trainstack/files/policies/"):
        assert member in listing, member
    # helm renders the published chart exactly as the local one
    remote = _template(published["reference"], "--version", version, "--plain-http")
    local = _template(str(ROOT / "charts" / "trainstack"))
    assert remote == local
    assert "kind: CustomResourceDefinition" in remote and "kind: ClusterTrainingRuntime" in remote


def test_a_signed_chart_is_pulled_and_verified_from_the_registry(registry, tmp_path):
    """publish --sign pushes the provenance with the archive: `helm pull --verify` of the OCI reference checks it
    against the release's public keyring, and refuses with another key's."""
    home, pubring, key = gpg_home(tmp_path, "release")
    _, other, _ = gpg_home(tmp_path, "other")
    result = run_cli("chart", "publish", "--registry", f"oci://{registry}/signed", "--plain-http", "--sign", key,
                     env={"GNUPGHOME": str(home)})
    assert result.returncode == 0, result.stderr
    reference, version = f"oci://{registry}/signed/trainstack", _chart_version()
    (tmp_path / "ok").mkdir()
    (tmp_path / "bad").mkdir()
    pulled = helm.run(["pull", reference, "--version", version, "--plain-http", "--verify", "--keyring", str(pubring),
                       "-d", str(tmp_path / "ok")], check=False)
    assert pulled.returncode == 0, pulled.stderr
    assert (tmp_path / "ok" / f"trainstack-{version}.tgz.prov").is_file()
    refused = helm.run(["pull", reference, "--version", version, "--plain-http", "--verify", "--keyring", str(other),
                        "-d", str(tmp_path / "bad")], check=False)
    assert refused.returncode != 0


def test_republishing_the_same_chart_is_a_no_op(registry, tmp_path):
    root = _checkout_copy(tmp_path)  # a snapshot: others editing the checkout meanwhile change nothing here
    first = _publish(registry, "same", "--output", "json", root=root)
    second = _publish(registry, "same", "--output", "json", root=root)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert json.loads(first.stdout)["action"] == "pushed"
    assert json.loads(second.stdout)["action"] == "already published"
    assert json.loads(second.stdout)["digest"] == json.loads(first.stdout)["digest"]


def test_a_published_version_with_other_content_is_never_overwritten(registry, tmp_path):
    original_root = _checkout_copy(tmp_path / "a")
    changed_root = _checkout_copy(tmp_path / "b")
    original = _publish(registry, "other", "--output", "json", root=original_root)
    assert original.returncode == 0, original.stderr
    values = changed_root / "charts" / "trainstack" / "values.yaml"
    values.write_text(values.read_text() + "\n# a change under the same chart version\n")
    changed = _publish(registry, "other", root=changed_root)
    assert_one_line_error(changed, f"version {_chart_version()} is already published", "different content",
                          "Chart.yaml")
    # the registry still serves the original
    again = _publish(registry, "other", "--output", "json", root=original_root)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["action"] == "already published"
    assert json.loads(again.stdout)["digest"] == json.loads(original.stdout)["digest"]


def test_a_development_registry_takes_the_working_trees_chart_under_the_same_version(registry, tmp_path):
    """What the e2e does on its cluster's registry, whose storage outlives the runs: replace=True pushes the
    changed chart over the version an earlier run published, and the registry then serves the new one."""
    from trainstack import publish

    original_root, changed_root = _checkout_copy(tmp_path / "a"), _checkout_copy(tmp_path / "b")
    first = _publish(registry, "dev", "--output", "json", root=original_root)
    assert first.returncode == 0, first.stderr
    values = changed_root / "charts" / "trainstack" / "values.yaml"
    values.write_text(values.read_text() + "\n# a change under the same chart version\n")
    replaced = publish.publish(f"oci://{registry}/dev", plain_http=True, chart_dir=changed_root / "charts" / "trainstack",
                               out_dir=tmp_path / "out", replace=True)
    assert replaced.action == "replaced" and replaced.digest != json.loads(first.stdout)["digest"]
    assert publish.published_digest(replaced.reference, replaced.version, plain_http=True) == replaced.digest


def test_unreachable_registry_is_one_line():
    result = run_cli("chart", "publish", "--registry", f"oci://127.0.0.1:{free_port()}/charts", "--plain-http")
    assert_one_line_error(result, "unreachable", "connection refused")


def test_missing_dependencies_are_one_line(tmp_path):
    root = _checkout_copy(tmp_path)
    for archive in (root / "charts" / "trainstack" / "charts").glob("kubeflow-trainer-*.tgz"):
        archive.unlink()
    result = run_cli("chart", "publish", "--registry", "oci://127.0.0.1:1/charts", "--plain-http",
                     env={"TRAINSTACK_ROOT": str(root)})
    assert_one_line_error(result, "dependencies are missing kubeflow-trainer-", "trainstack deps")
