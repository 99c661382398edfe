"""`trainstack chart publish`: the umbrella chart as an OCI artifact, pushed with the pinned helm.

The chart (charts/trainstack with its resolved dependencies in charts/ and the generated crds/) is
packaged by helm (Chart.yaml checks, .helmignore; the runtimes and policies are chart files), then
re-archived reproducibly (entries sorted, mtimes, owners and the gzip header fixed): the same chart
gives the same bytes, so the OCI layer digest identifies its content. Before pushing, the version
already in the registry (if any) is pulled and its digest compared: the same content is a no-op, a
different content under the same version is refused (a registry would overwrite the tag silently).
The version is Chart.yaml's; nothing here repeats it.
"""

from __future__ import annotations

import hashlib
import os
import re
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from . import chartpack, deps, helm, paths, proc, yamlio
from . import lock as lockmod
from .errors import UsageError, UserError, output_line

OCI_REF = re.compile(r"^oci://[^/\s]+(/[^\s]*[^/\s])?$")
NOT_FOUND = ("not found", "manifest unknown", "name unknown", "404")
UNREACHABLE = ("connection refused", "no such host", "i/o timeout", "dial tcp", "server gave http response",
               "connection reset", "tls: ", "network is unreachable", "deadline exceeded")


@dataclass
class Published:
    reference: str  # oci://HOST/PATH/NAME
    version: str
    digest: str  # sha256 of the chart archive: the OCI chart layer's digest
    action: str  # pushed | already published | replaced
    archive: str


def chart_meta(chart_dir: Path) -> tuple[str, str]:
    """(name, version) from Chart.yaml."""
    chart_yaml = chart_dir / "Chart.yaml"
    try:
        data = yamlio.load(chart_yaml.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise UserError(f"{chart_yaml}: cannot read the chart: {err}".splitlines()[0]) from None
    if not isinstance(data, dict) or not data.get("name") or not data.get("version"):
        raise UserError(f"{chart_yaml}: 'name' and 'version' must be set")
    return str(data["name"]), str(data["version"])


def check_registry(registry: str) -> str:
    registry = registry.rstrip("/")
    if not OCI_REF.match(registry):
        raise UsageError(f"--registry '{registry}' is not an OCI reference", "use oci://HOST[:PORT]/PATH")
    return registry


def package(chart_dir: Path, out_dir: Path, lock: lockmod.Lock | None = None) -> Path:
    """The chart with its dependencies and CRDs as a reproducible NAME-VERSION.tgz in out_dir."""
    lock = lock or lockmod.load()
    name, version = chart_meta(chart_dir)
    if deps.up_to_date(chart_dir, lock) is None:
        missing = [f"{p.name}-{p.version}.tgz" for p in lock.charts()
                   if not (chart_dir / "charts" / f"{p.name}-{p.version}.tgz").is_file()]
        what = f"missing {', '.join(missing)}" if missing else "not built from this lock (or crds/ missing)"
        raise UserError(f"{chart_dir / 'charts'}: the chart's dependencies are {what}",
                        "run 'trainstack deps' first")
    with tempfile.TemporaryDirectory(prefix="trainstack-publish-") as tmp:
        helm.run(["package", str(chart_dir), "-d", tmp], lock=lock)
        packed = Path(tmp) / f"{name}-{version}.tgz"
        if not packed.is_file():
            raise UserError(f"helm package wrote no {packed.name} for {chart_dir}")
        unpacked = Path(tmp) / "unpacked"
        with tarfile.open(packed) as tar:
            tar.extractall(unpacked, filter="data")
        out = out_dir / f"{name}-{version}.tgz"
        chartpack.pack_chart(unpacked / name, name, out)
    return out


def provenance_body(archive: Path) -> str:
    """What `helm package --sign` signs for ARCHIVE: the chart's Chart.yaml, then `...` and the archive's
    SHA-256 under `files:` (helm's provenance format; `helm verify` checks the signature and this digest)."""
    with tarfile.open(archive) as tar:
        member = next((m for m in tar.getmembers() if m.name.count("/") == 1 and m.name.endswith("/Chart.yaml")), None)
        extracted = tar.extractfile(member) if member else None
        if extracted is None:
            raise UserError(f"{archive}: not a chart archive (no NAME/Chart.yaml)")
        metadata = yamlio.load(extracted.read())
    body = yaml.safe_dump(metadata, sort_keys=True).rstrip("\n")
    files = yaml.safe_dump({"files": {archive.name: _sha256(archive)}}, sort_keys=True)
    return f"{body}\n\n...\n{files}"


def sign(archive: Path, key: str, gnupg_home: Path | None = None) -> Path:
    """ARCHIVE.prov beside it: the provenance body clear-signed by KEY (a gpg user ID or fingerprint in the
    release process's keyring, GNUPGHOME or gnupg_home), as `helm package --sign` writes it. The archive is
    trainstack's reproducible one, so helm's own packaging (which would sign other bytes) is not used."""
    prov = archive.with_name(archive.name + ".prov")
    env = {**os.environ, **({"GNUPGHOME": str(gnupg_home)} if gnupg_home else {})}
    result = proc.run(["gpg", "--batch", "--yes", "--armor", "--clearsign", "--digest-algo", "SHA512",
                       "--local-user", key, "--output", str(prov)], input=provenance_body(archive), env=env,
                      check=False, what="gpg --clearsign")
    if result.returncode != 0:
        raise UserError(f"cannot sign {archive.name} with key '{key}': "
                        f"{output_line(result.stderr, markers=('gpg: ',), empty='gpg failed')}",
                        "name a secret key of the keyring (gpg --list-secret-keys; GNUPGHOME)")
    return prov


def _sha256(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def published_digest(reference: str, version: str, plain_http: bool, lock: lockmod.Lock | None = None) -> str | None:
    """Digest of the chart archive published as reference:version, or None when that version is not there."""
    with tempfile.TemporaryDirectory(prefix="trainstack-pull-") as tmp:
        args = ["pull", reference, "--version", version, "-d", tmp, *(["--plain-http"] if plain_http else [])]
        result = helm.run(args, lock=lock, check=False, timeout=120)
        if result.returncode == 0:
            pulled = sorted(Path(tmp).glob("*.tgz"))
            if not pulled:
                raise UserError(f"helm pull {reference} --version {version} wrote no archive")
            return _sha256(pulled[0])
        message = helm.first_error_line(result.stderr or result.stdout)
        lowered = message.lower()
        if any(s in lowered for s in UNREACHABLE):
            raise UserError(f"registry {reference} is unreachable: {message}",
                            "check the address (and --plain-http for a registry without TLS)")
        if any(s in lowered for s in NOT_FOUND):
            return None
        raise UserError(f"cannot read {reference}:{version} from the registry: {message}")


def publish(registry: str, plain_http: bool = False, chart_dir: Path | None = None,
            lock: lockmod.Lock | None = None, out_dir: Path | None = None, sign_key: str = "",
            replace: bool = False) -> Published:
    """Package the chart and push it to REGISTRY. A version already there with other content is refused
    (a published version is never overwritten) unless REPLACE: a development registry, such as the e2e
    cluster's, whose storage outlives the runs while the working tree's chart changes under one version."""
    lock = lock or lockmod.load()
    chart_dir = chart_dir or paths.chart_dir()
    registry = check_registry(registry)
    name, version = chart_meta(chart_dir)
    reference = f"{registry}/{name}"
    out_dir = out_dir or paths.cache_dir() / "publish"
    out_dir.mkdir(parents=True, exist_ok=True)
    archive = package(chart_dir, out_dir, lock)
    prov = archive.with_name(archive.name + ".prov")
    prov.unlink(missing_ok=True)  # helm push uploads a .prov beside the archive: only this run's
    if sign_key:
        sign(archive, sign_key)
    digest = _sha256(archive)
    existing = published_digest(reference, version, plain_http, lock)
    if existing == digest:
        return Published(reference, version, digest, "already published", str(archive))
    if existing is not None and not replace:
        raise UserError(
            f"{chart_dir / 'Chart.yaml'}: version {version} is already published at {reference} with different "
            f"content ({existing}, this chart is {digest})",
            "bump 'version' in Chart.yaml; a published version is never overwritten")
    result = helm.run(["push", str(archive), registry, *(["--plain-http"] if plain_http else [])],
                      lock=lock, check=False, timeout=300)
    if result.returncode != 0:
        message = helm.first_error_line(result.stderr or result.stdout)
        if any(s in message.lower() for s in UNREACHABLE):
            raise UserError(f"registry {registry} is unreachable: {message}",
                            "check the address (and --plain-http for a registry without TLS)")
        raise UserError(f"helm push to {registry} failed: {message}")
    return Published(reference, version, digest, "replaced" if existing is not None else "pushed", str(archive))


TEST_TEMPLATE = "templates/platform-test/pod.yaml"  # the hook's one image is its pod's


def images(objects: list[dict[str, Any]], lock: lockmod.Lock | None = None) -> list[str]:
    """Every image the rendered OBJECTS run (containers and init containers of any pod template, the golden
    runtimes' included), sorted; with @digest where the lock pins one for that reference."""
    lock = lock or lockmod.load()
    digests = {f"{i.registry}/{i.repository}:{i.tag}": i.digest for i in lock.images() if i.digest}
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key in ("containers", "initContainers"):
                for container in node.get(key) or []:
                    if isinstance(container, dict) and isinstance(container.get("image"), str):
                        found.add(container["image"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(objects)
    return sorted(f"{ref}@{digests[ref]}" if ref in digests and "@" not in ref else ref for ref in found)
