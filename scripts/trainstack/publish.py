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

import argparse
import hashlib
import json
import re
import tarfile
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from . import chartpack, cmdline, deps, helm, paths, progress
from . import lock as lockmod
from .errors import UsageError, UserError

OCI_REF = re.compile(r"^oci://[^/\s]+(/[^\s]*[^/\s])?$")
NOT_FOUND = ("not found", "manifest unknown", "name unknown", "404")
UNREACHABLE = ("connection refused", "no such host", "i/o timeout", "dial tcp", "server gave http response",
               "connection reset", "tls: ", "network is unreachable", "deadline exceeded")


@dataclass
class Published:
    reference: str  # oci://HOST/PATH/NAME
    version: str
    digest: str  # sha256 of the chart archive: the OCI chart layer's digest
    action: str  # pushed | already published
    archive: str


def chart_meta(chart_dir: Path) -> tuple[str, str]:
    """(name, version) from Chart.yaml."""
    chart_yaml = chart_dir / "Chart.yaml"
    try:
        data = yaml.safe_load(chart_yaml.read_text())
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
            lock: lockmod.Lock | None = None, out_dir: Path | None = None) -> Published:
    lock = lock or lockmod.load()
    chart_dir = chart_dir or paths.chart_dir()
    registry = check_registry(registry)
    name, version = chart_meta(chart_dir)
    reference = f"{registry}/{name}"
    out_dir = out_dir or paths.cache_dir() / "publish"
    out_dir.mkdir(parents=True, exist_ok=True)
    archive = package(chart_dir, out_dir, lock)
    digest = _sha256(archive)
    existing = published_digest(reference, version, plain_http, lock)
    if existing == digest:
        return Published(reference, version, digest, "already published", str(archive))
    if existing is not None:
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
    return Published(reference, version, digest, "pushed", str(archive))


def _cmd(args: argparse.Namespace) -> int:
    result = publish(args.registry, plain_http=args.plain_http)
    if args.output == "json":
        print(json.dumps(asdict(result), indent=2, sort_keys=True))
    else:
        progress.table("trainstack chart publish", ["chart", "version", "digest", "result"],
                       [(result.reference, result.version, result.digest, result.action)])
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    csub = cmdline.group(sub, "chart", "the umbrella chart as an artifact")
    pub = csub.add_parser("publish", help="package charts/trainstack (dependencies and CRDs included) and push it "
                                          "to an OCI registry with the pinned helm; never overwrites a version")
    pub.add_argument("--registry", required=True, help="where to push: oci://HOST[:PORT]/PATH")
    pub.add_argument("--plain-http", action="store_true", help="the registry speaks plain HTTP (loopback only)")
    pub.add_argument("--output", choices=["text", "json"], default="text")
    pub.set_defaults(func=_cmd)

