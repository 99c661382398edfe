"""`trainstack chart package`: one reproducible archive (dependencies and CRDs inside) that stock helm v4 and v3
lint, template and show, and helm provenance signed by the release key: `helm verify` passes with its public
keyring, fails on a tampered archive and with another key's keyring."""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from conftest import ROOT
from support.cli import assert_one_line_error, run_cli
from support.signing import gpg_home
from trainstack import tools

pytestmark = pytest.mark.slow
def helm(binary: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(tools.require(binary)), *args], capture_output=True, text=True, timeout=300,
                          check=False)


@pytest.fixture(scope="module")
def signed(chart_ready, tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("package")
    home, pubring, key = gpg_home(tmp, "release")
    _, other, _ = gpg_home(tmp, "other")
    result = run_cli("chart", "package", "--out-dir", str(tmp / "dist"), "--sign", key,
                     env={"GNUPGHOME": str(home)})
    assert result.returncode == 0, result.stderr
    archives = sorted((tmp / "dist").glob("*.tgz"))
    assert len(archives) == 1
    return {"archive": archives[0], "prov": Path(f"{archives[0]}.prov"), "pubring": pubring, "other": other,
            "tmp": tmp}


@pytest.mark.parametrize("binary", ["helm", "helm3"])
def test_the_signed_archive_verifies_with_the_release_keyring(signed, binary):
    result = helm(binary, "verify", str(signed["archive"]), "--keyring", str(signed["pubring"]))
    assert result.returncode == 0, result.stderr
    assert "release@trainstack.invalid" in result.stdout + result.stderr


@pytest.mark.parametrize("binary", ["helm", "helm3"])
def test_a_tampered_archive_or_another_key_fails_verify(signed, binary, tmp_path):
    tampered = tmp_path / signed["archive"].name
    data = io.BytesIO()
    with tarfile.open(signed["archive"]) as src, tarfile.open(fileobj=data, mode="w:gz") as dst:
        for member in src.getmembers():
            payload = src.extractfile(member).read() if member.isfile() else None
            if member.name.endswith("trainstack/values.yaml"):
                payload += b"\nextra: tampered\n"
                member.size = len(payload)
            dst.addfile(member, io.BytesIO(payload) if payload is not None else None)
    tampered.write_bytes(data.getvalue())
    shutil.copy(signed["prov"], tmp_path / signed["prov"].name)
    assert helm(binary, "verify", str(tampered), "--keyring", str(signed["pubring"])).returncode != 0
    assert helm(binary, "verify", str(signed["archive"]), "--keyring", str(signed["other"])).returncode != 0


@pytest.mark.parametrize("binary", ["helm", "helm3"])
def test_stock_helm_lints_templates_and_shows_the_archive_alone(signed, binary):
    archive = str(signed["archive"])
    assert helm(binary, "lint", archive).returncode == 0
    rendered = helm(binary, "template", "trainstack", archive, "-n", "kubeflow-system", "--include-crds")
    assert rendered.returncode == 0, rendered.stderr
    assert "kind: ClusterTrainingRuntime" in rendered.stdout and "kind: ValidatingAdmissionPolicy" in rendered.stdout
    shown = helm(binary, "show", "values", archive)
    assert shown.returncode == 0
    assert shown.stdout.rstrip("\n") == (ROOT / "charts" / "trainstack" / "values.yaml").read_text().rstrip("\n")


def test_packaging_twice_gives_the_same_bytes(signed, tmp_path):
    result = run_cli("chart", "package", "--out-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    again = tmp_path / signed["archive"].name
    assert again.read_bytes() == signed["archive"].read_bytes()
    assert not Path(f"{again}.prov").exists()


def test_an_unknown_signing_key_is_one_line(signed, tmp_path):
    home = tmp_path / "empty-gnupg"
    home.mkdir(mode=0o700)
    result = run_cli("chart", "package", "--out-dir", str(tmp_path / "dist"), "--sign", "nobody@trainstack.invalid",
                     env={"GNUPGHOME": str(home)})
    assert_one_line_error(result, "cannot sign", "nobody@trainstack.invalid")


def test_chart_images_lists_what_an_environment_runs_for_mirroring(chart_ready, lock):
    """`trainstack chart images --env ENV`: prod (global.imageRegistry set) runs only mirrored images, and dev's
    list (no mirror) is what to copy into one: every entry is a reference the lock pins. prod runs dev's images
    and the tracking server's (tracking is on in staging and prod only)."""
    prod = run_cli("chart", "images", "--env", "prod")
    assert prod.returncode == 0, prod.stderr
    refs = prod.stdout.split()
    assert refs and all(ref.startswith("mirror.example.com/") for ref in refs), refs
    dev = run_cli("chart", "images", "--env", "dev").stdout.split()
    pinned = {f"{i.registry}/{i.repository}:{i.tag}" for i in lock.images()}
    assert dev and set(dev) <= pinned, set(dev) - pinned
    mlflow = lock.image("mlflow")
    assert {ref.split("/", 1)[1] for ref in dev} | {f"{mlflow.repository}:{mlflow.tag}"} == \
        {ref.split("/", 1)[1] for ref in refs}
