"""Reads and checks trainstack.lock.yaml, the one place every external version is pinned.

Callers ask for entries by name; a missing or malformed entry raises a UserError that names
the lock file and the key, so a broken lock never surfaces as a KeyError traceback.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from . import paths, yamlio
from .errors import UserError

FLOATING_TAGS = {"latest", "main", "master", "stable", "edge", "nightly"}
SEMVER_TAG = re.compile(r"^v?\d+\.\d+\.\d+([-+].+)?$")
# What a kubernetes.matrix entry may say (the gates and runtime config replace the pinned release's there).
MATRIX_KEYS = ("sum", "featureGates", "schedulerFeatureGates", "runtimeConfig")


@dataclass(frozen=True)
class Tool:
    """A pinned CLI built from a Go module (one module can yield several binaries)."""

    name: str
    module: str
    version: str
    packages: dict[str, str]
    ldflags: str = ""
    version_args: tuple[str, ...] = ()
    # versionArgs written per binary (a mapping): kubectl's differ from the servers' of its module.
    binary_version_args: tuple[tuple[str, tuple[str, ...]], ...] = ()
    staging_replace: bool = False
    optional: bool = False
    tags: tuple[str, ...] = ()  # Go build tags
    # A newer Go than the machine's, fetched through the module proxy (GOTOOLCHAIN=goX.Y.Z).
    go_toolchain: str = ""
    # Copy the module's own version replaces (not its local-path ones) into the wrapper module.
    copy_replaces: bool = False
    # Extra module requirements of the wrapper (modules a local-path replace points at upstream).
    requires: tuple[tuple[str, str], ...] = ()
    # A setup tier of its own (e.g. gitops: `make setup-gitops`): `tools install` without names skips it.
    tier: str = ""

    def version_args_for(self, binary: str) -> tuple[str, ...]:
        """The arguments that make BINARY print its version (versionArgs, or its own entry there)."""
        return dict(self.binary_version_args).get(binary, self.version_args)

    @property
    def minor(self) -> str:
        return self.version.lstrip("v").split(".")[1]

    def expanded_ldflags(self, go_mod: str = "") -> str:
        """The ldflags with {version}, {semver} (no leading v) and {minor} (of this tool), and {k8sMajor}/{k8sMinor}: the
        Kubernetes version of the k8s.io/client-go that `go_mod` (the module's go.mod) requires,
        computed as upstream release builds do (helm's Makefile: client-go v0.X.Y is Kubernetes 1.X);
        {prometheusVersion}: the Prometheus release of a prometheus/prometheus module version."""
        flags = self.ldflags.replace("{version}", self.version).replace("{minor}", self.minor)
        flags = flags.replace("{semver}", self.version.lstrip("v"))  # the version without its leading v
        if "{k8sMajor}" in flags or "{k8sMinor}" in flags:
            found = re.search(r"^\s*k8s\.io/client-go\s+v(\d+)\.(\d+)\.", go_mod, re.MULTILINE)
            if not found:
                raise ValueError(f"{self.name}: ldflags use the Kubernetes version, but {self.module}@{self.version}'s "
                                 "go.mod requires no k8s.io/client-go")
            flags = flags.replace("{k8sMajor}", str(int(found.group(1)) + 1)).replace("{k8sMinor}", found.group(2))
        if "{prometheusVersion}" in flags:
            # Prometheus' Go module tags v0.<major><minor, 2 digits>.<patch> are its releases (v0.316.0 is 3.16.0),
            # the version its release build (promu, from the VERSION file) stamps.
            found = re.fullmatch(r"v0\.(\d+)(\d\d)\.(\d+)", self.version)
            if not found:
                raise UserError(f"trainstack.lock.yaml: tools.{self.name}.ldflags uses {{prometheusVersion}}, but "
                                f"version {self.version} is no Prometheus module version (v0.XYY.Z)")
            flags = flags.replace("{prometheusVersion}", f"{found.group(1)}.{int(found.group(2))}.{found.group(3)}")
        return flags


@dataclass(frozen=True)
class ModuleSource:
    """Upstream source at a release tag, fetched from the Go module proxy and verified."""

    module: str
    version: str
    sum: str
    path: str = ""


@dataclass(frozen=True)
class ChartPin:
    name: str
    version: str
    oci: str
    source: ModuleSource


@dataclass(frozen=True)
class Image:
    name: str
    registry: str
    repository: str
    tag: str
    digest: str = ""

    def reference(self, registry: str | None = None) -> str:
        host = registry or self.registry
        ref = f"{host}/{self.repository}:{self.tag}"
        return f"{ref}@{self.digest}" if self.digest else ref


@dataclass
class Lock:
    path: Path
    data: dict[str, Any] = field(repr=False)

    # -- raw access -----------------------------------------------------------------------
    def get(self, *keys: str) -> Any:
        """Value at keys, or a UserError naming the missing key in the lock file."""
        node: Any = self.data
        walked: list[str] = []
        for key in keys:
            walked.append(key)
            if not isinstance(node, dict) or key not in node:
                raise UserError(
                    f"{self.path}: missing lock entry '{'.'.join(walked)}'",
                    "add it to the lock file; see docs/versions.md",
                )
            node = node[key]
        return node

    def _str(self, *keys: str) -> str:
        value = self.get(*keys)
        if not isinstance(value, str) or not value:
            raise UserError(f"{self.path}: lock entry '{'.'.join(keys)}' must be a non-empty string")
        return value

    # -- typed views ----------------------------------------------------------------------
    @property
    def kubernetes_version(self) -> str:
        return self._str("kubernetes", "version")

    def _switches(self, *keys: str) -> dict[str, bool]:
        value = self.get(*keys)
        if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, bool) for k, v in value.items()):
            raise UserError(f"{self.path}: lock entry '{'.'.join(keys)}' must map names to true or false")
        return dict(value)

    @property
    def kubernetes_feature_gates(self) -> dict[str, bool]:
        """Feature gates of the local control plane's API server, controller manager and scheduler."""
        return self._switches("kubernetes", "featureGates")

    @property
    def kubernetes_scheduler_feature_gates(self) -> dict[str, bool]:
        """Feature gates of the local kube-scheduler alone, after kubernetes.featureGates (the gang's CPU fix)."""
        return self._switches("kubernetes", "schedulerFeatureGates")

    def without_gates(self) -> Lock:
        """This lock with no feature gates and no runtime config: the pinned control plane as its release comes
        (no native gang scheduler, the scheduler's defaults)."""
        kube = {**self.data["kubernetes"], "featureGates": {}, "schedulerFeatureGates": {}, "runtimeConfig": {}}
        return dataclasses.replace(self, data={**self.data, "kubernetes": kube})

    @property
    def kubernetes_runtime_config(self) -> dict[str, bool]:
        """The local API server's --runtime-config (API group versions turned on or off)."""
        return self._switches("kubernetes", "runtimeConfig")

    @property
    def kubernetes_supported(self) -> tuple[str, str]:
        """(oldest, newest) supported Kubernetes minor, as X.Y strings."""
        ends = []
        for end in ("oldest", "newest"):
            value = self.get("kubernetes", "supported", end)
            if not isinstance(value, str) or not re.fullmatch(r"1\.\d+", value):
                raise UserError(f"{self.path}: lock entry 'kubernetes.supported.{end}' must be a Kubernetes minor "
                                f"written as a string, e.g. \"1.33\"")
            ends.append(value)
        if minor_key(ends[0]) > minor_key(ends[1]):
            raise UserError(f"{self.path}: kubernetes.supported: oldest {ends[0]} is newer than newest {ends[1]}")
        return ends[0], ends[1]

    @property
    def kubernetes_constraint(self) -> str:
        """Chart.yaml's kubeVersion for the supported range: every patch (and provider build, the -0) of the
        oldest through the newest minor, nothing newer (a minor no test has run on is not claimed)."""
        oldest, newest = self.kubernetes_supported
        major, minor = newest.split(".")
        return f">={oldest}.0-0 <{major}.{int(minor) + 1}.0-0"

    def _matrix_entries(self) -> dict[str, dict[str, Any]]:
        entries = self.get("kubernetes", "matrix")
        if not isinstance(entries, dict) or not all(isinstance(e, dict) for e in entries.values()):
            raise UserError(f"{self.path}: lock entry 'kubernetes.matrix' must map release versions to mappings")
        for version, entry in entries.items():
            where = f"kubernetes.matrix.{version}"
            if not isinstance(version, str) or not re.fullmatch(r"v1\.\d+\.\d+", version):
                raise UserError(f"{self.path}: {where}: the key must be a Kubernetes release (v1.X.Y)")
            if not str(entry.get("sum", "")).startswith("h1:"):
                raise UserError(f"{self.path}: lock entry '{where}.sum' must be the module's Go h1: checksum")
            if set(entry) - set(MATRIX_KEYS):
                raise UserError(f"{self.path}: {where}: unknown keys {sorted(set(entry) - set(MATRIX_KEYS))} "
                                f"({', '.join(MATRIX_KEYS)})")
        return entries

    def kubernetes_matrix(self) -> list[str]:
        """Every Kubernetes release trainstack is tested on, oldest first: the pinned one and the matrix's."""
        return sorted({self.kubernetes_version, *self._matrix_entries()}, key=release_key)

    def kubernetes_release(self, text: str) -> str | None:
        """The tested release TEXT names (X.Y, vX.Y or vX.Y.Z), or None."""
        wanted = text.strip().lstrip("v")
        return next((v for v in self.kubernetes_matrix() if wanted in (v.lstrip("v"), minor_of(v))), None)

    def kubernetes_sums(self) -> dict[str, str]:
        """The h1: sum of each matrix release's k8s.io/kubernetes module zip, by release."""
        return {version: str(entry["sum"]) for version, entry in self._matrix_entries().items()}

    def for_kubernetes(self, version: str) -> Lock:
        """This lock with VERSION as the Kubernetes release: the control plane and node tools, their feature
        gates and runtime config, and validate's built-in schemas (a release of kubernetes.matrix)."""
        if version == self.kubernetes_version:
            return self
        entries = self._matrix_entries()
        if version not in entries:
            raise UserError(f"{self.path}: Kubernetes {version} is not in kubernetes.matrix "
                            f"(tested: {', '.join(self.kubernetes_matrix())})")
        entry = entries[version]
        data = copy.deepcopy(self.data)
        kube = data["kubernetes"]
        # the pinned release stays tested: it takes the matrix entry's place, with its own gates and schemas' sum
        kube["matrix"] = {v: e for v, e in kube["matrix"].items() if v != version}
        kube["matrix"][self.kubernetes_version] = {"sum": self.source("kubernetes-openapi").sum,
                                                   "featureGates": self.kubernetes_feature_gates,
                                                   "schedulerFeatureGates": self.kubernetes_scheduler_feature_gates,
                                                   "runtimeConfig": self.kubernetes_runtime_config}
        kube["version"] = version
        kube["featureGates"] = dict(entry.get("featureGates") or {})
        kube["schedulerFeatureGates"] = dict(entry.get("schedulerFeatureGates") or {})
        kube["runtimeConfig"] = dict(entry.get("runtimeConfig") or {})
        for name in ("kubernetes", "kubernetes-node"):
            data["tools"][name]["version"] = version
        for image in (data.get("builtImages") or {}).values():  # the pause image is tagged with the release
            if isinstance(image, dict) and image.get("tag") == self.kubernetes_version:
                image["tag"] = version
        data["sources"]["kubernetes-openapi"] = {**data["sources"]["kubernetes-openapi"], "version": version,
                                                 "sum": entry["sum"]}
        return Lock(path=self.path, data=data)

    def tool(self, name: str) -> Tool:
        entry = self.get("tools", name)
        if not isinstance(entry, dict):
            raise UserError(f"{self.path}: lock entry 'tools.{name}' must be a mapping")
        packages = self.get("tools", name, "packages")
        if not isinstance(packages, dict) or not packages:
            raise UserError(f"{self.path}: lock entry 'tools.{name}.packages' must map binary names to Go packages")
        version_args = entry.get("versionArgs", [])
        if not isinstance(version_args, list | dict) or (isinstance(version_args, dict) and (
                set(version_args) - set(packages) or not all(isinstance(a, list) for a in version_args.values()))):
            raise UserError(f"{self.path}: lock entry 'tools.{name}.versionArgs' must be a list of arguments, or map "
                            f"some of its binaries ({', '.join(packages)}) to theirs")
        return Tool(
            name=name,
            module=self._str("tools", name, "module"),
            version=self._str("tools", name, "version"),
            packages={str(k): str(v) for k, v in packages.items()},
            ldflags=str(entry.get("ldflags", "")),
            version_args=tuple(str(a) for a in version_args) if isinstance(version_args, list) else (),
            binary_version_args=tuple((str(b), tuple(str(a) for a in args)) for b, args in version_args.items())
            if isinstance(version_args, dict) else (),
            staging_replace=bool(entry.get("stagingReplace", False)),
            optional=bool(entry.get("optional", False)),
            tags=tuple(str(tag) for tag in entry.get("tags", ())),
            go_toolchain=str(entry.get("goToolchain", "")),
            copy_replaces=bool(entry.get("copyReplaces", False)),
            requires=tuple((str(m), str(v)) for m, v in (entry.get("require") or {}).items()),
            tier=str(entry.get("tier", "")),
        )

    def tools(self) -> list[Tool]:
        return [self.tool(name) for name in self.get("tools")]

    def tool_for_binary(self, binary: str) -> Tool:
        for tool in self.tools():
            if binary in tool.packages:
                return tool
        raise UserError(f"{self.path}: no lock entry under 'tools' provides the binary '{binary}'")

    def _source(self, keys: tuple[str, ...]) -> ModuleSource:
        entry = self.get(*keys)
        if not isinstance(entry, dict):
            raise UserError(f"{self.path}: lock entry '{'.'.join(keys)}' must be a mapping")
        return ModuleSource(
            module=self._str(*keys, "module"),
            version=self._str(*keys, "version"),
            sum=self._str(*keys, "sum"),
            path=str(entry.get("path", "")),
        )

    def chart(self, name: str) -> ChartPin:
        return ChartPin(
            name=name,
            version=self._str("charts", name, "version"),
            oci=self._str("charts", name, "oci"),
            source=self._source(("charts", name, "source")),
        )

    def charts(self) -> list[ChartPin]:
        return [self.chart(name) for name in self.get("charts")]

    def source(self, name: str) -> ModuleSource:
        return self._source(("sources", name))

    def image(self, name: str) -> Image:
        entry = self.get("images", name)
        if not isinstance(entry, dict):
            raise UserError(f"{self.path}: lock entry 'images.{name}' must be a mapping")
        return Image(
            name=name,
            registry=self._str("images", name, "registry"),
            repository=self._str("images", name, "repository"),
            tag=self._str("images", name, "tag"),
            digest=str(entry.get("digest") or ""),
        )

    def images(self) -> list[Image]:
        return [self.image(name) for name in self.get("images")]

    def kind_node_image(self) -> Image:
        entry = self.get("kubernetes", "kindNodeImage")
        return Image(name="kind-node", digest=str(entry.get("digest") or ""),
                     registry=self._str("kubernetes", "kindNodeImage", "registry"),
                     repository=self._str("kubernetes", "kindNodeImage", "repository"),
                     tag=self._str("kubernetes", "kindNodeImage", "tag"))

    # -- checks ---------------------------------------------------------------------------
    def problems(self) -> list[str]:
        """Everything wrong with the lock, as sentences (empty when it is sound)."""
        found: list[str] = []

        def check(fn: Callable[[], object]) -> None:
            try:
                fn()
            except UserError as err:
                found.append(err.message)

        check(lambda: self.kubernetes_version)
        check(lambda: self.kubernetes_feature_gates)
        check(lambda: self.kubernetes_scheduler_feature_gates)
        check(lambda: self.kubernetes_runtime_config)
        try:
            oldest, newest = self.kubernetes_supported
            tested = {minor_of(v) for v in self.kubernetes_matrix()}
            for end in (oldest, newest):
                if end not in tested:
                    found.append(f"{self.path}: kubernetes.supported names {end}, but no release of {end} is tested "
                                 "(kubernetes.version or kubernetes.matrix)")
            for version in self.kubernetes_matrix():
                if not minor_key(oldest) <= minor_key(minor_of(version)) <= minor_key(newest):
                    found.append(f"{self.path}: Kubernetes {version} is tested but outside kubernetes.supported "
                                 f"({oldest} to {newest})")
        except UserError as err:
            found.append(err.message)
        for section in ("tools", "charts", "images", "sources"):
            try:
                names = list(self.get(section))
            except UserError as err:
                found.append(err.message)
                continue
            for name in names:
                loader = {"tools": self.tool, "charts": self.chart, "images": self.image,
                          "sources": self.source}[section]
                check(functools.partial(loader, name))
        try:
            for tool in self.tools():
                if not SEMVER_TAG.match(tool.version):
                    found.append(f"{self.path}: tools.{tool.name}.version '{tool.version}' is not a release version")
                if tool.go_toolchain and not re.match(r"^go\d+\.\d+\.\d+$", tool.go_toolchain):
                    found.append(f"{self.path}: tools.{tool.name}.goToolchain '{tool.go_toolchain}' must be a "
                                 "pinned Go release (goX.Y.Z)")
                for module, version in tool.requires:
                    if not SEMVER_TAG.match(version):
                        found.append(f"{self.path}: tools.{tool.name}.require.{module} '{version}' is not a release version")
            for image in self.images():
                if image.tag in FLOATING_TAGS or not image.tag:
                    found.append(f"{self.path}: images.{image.name}.tag '{image.tag}' floats; pin a release tag")
                if image.digest and not re.match(r"^sha256:[0-9a-f]{64}$", image.digest):
                    found.append(f"{self.path}: images.{image.name}.digest must be sha256:<64 hex>")
            for chart in self.charts():
                if not chart.source.sum.startswith("h1:"):
                    found.append(f"{self.path}: charts.{chart.name}.source.sum must be a Go h1: checksum")
        except UserError as err:
            found.append(err.message)
        return found


def minor_of(version: str) -> str:
    """"1.33" of v1.33.13."""
    return ".".join(version.lstrip("v").split(".")[:2])


def minor_key(minor: str) -> tuple[int, ...]:
    return tuple(int(part) for part in minor.split("."))


def release_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.lstrip("v").split(".")[:3])


# Run on another tested Kubernetes release: `make test-matrix` sets it for each release of kubernetes.matrix,
# and every lock read in that process and its children sees that release (Lock.for_kubernetes).
KUBERNETES_ENV = "TRAINSTACK_KUBERNETES"


def load(path: Path | None = None) -> Lock:
    """The lock at path (default: the repository's), parsed; raises UserError when unusable. With
    TRAINSTACK_KUBERNETES set, the lock as it is for that release of kubernetes.matrix."""
    lock = _load(Path(path) if path else paths.lock_path())
    release = os.environ.get(KUBERNETES_ENV, "").strip()
    return _for_release(lock, release) if release else lock


_DERIVED: dict[tuple[Path, str], tuple[Lock, Lock]] = {}  # (path, release) -> (the lock read, its derived lock)


def _for_release(lock: Lock, release: str) -> Lock:
    key = (lock.path, release)
    if key not in _DERIVED or _DERIVED[key][0] is not lock:
        try:
            _DERIVED[key] = (lock, lock.for_kubernetes(release))
        except UserError as err:
            raise UserError(f"{KUBERNETES_ENV}={release}: {err.message}") from None
    return _DERIVED[key][1]


@lru_cache(maxsize=8)
def _load(path: Path) -> Lock:
    if not path.is_file():
        raise UserError(f"lock file {path} not found", "run from a trainstack checkout or set TRAINSTACK_LOCK")
    try:
        data = yamlio.load(path.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise UserError(f"{path}{where}: the lock file is not valid YAML") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: the lock file must be a YAML mapping")
    return Lock(path=path, data=data)
