"""The schema catalog: every kind we can validate, its JSON Schema, and compiled validators.

Built once per (Kubernetes version, pinned CRDs) into `paths.cache_dir()/validate/` (never
committed) and loaded from there afterwards, so a warm run starts in milliseconds. Validators
are compiled lazily with jsonschema-rs and cached per (apiVersion, kind).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema_rs

from .. import lock as lockmod
from .. import paths, progress, tools
from ..errors import UsageError, UserError
from . import builtin, crds

CONVERTER = 4  # bump when a conversion changes: old cache files are then ignored
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
K8S_MODULE = "k8s.io/kubernetes"


@dataclass
class KindInfo:
    """One servable kind: where its schema came from and how the API server addresses it."""

    apiVersion: str
    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool
    builtin: bool
    origin: str = ""
    structural: dict | None = None  # CRDs only: the cleaned openAPIV3Schema
    status_subresource: bool = False
    schema: dict | None = field(default=None, repr=False)  # CRDs: JSON Schema without $defs

    @property
    def key(self) -> str:
        return f"{self.apiVersion}/{self.kind}"


def _kube_source(lock: lockmod.Lock, minor: str | None) -> tuple[str, str | None]:
    """(k8s.io/kubernetes version, expected h1 sum or None) for the wanted minor (X.Y)."""
    pinned = lock.tool("kubernetes").version
    candidates: dict[str, str | None] = {_minor(pinned): None}
    versions = {_minor(pinned): pinned}
    for name in (lock.data.get("sources") or {}):
        try:
            source = lock.source(name)
        except UserError:
            continue
        if source.module == K8S_MODULE:
            versions.setdefault(_minor(source.version), source.version)
            if versions[_minor(source.version)] == source.version:
                candidates[_minor(source.version)] = source.sum
    for version, sum_ in lock.kubernetes_sums().items():  # the other releases make test-matrix runs on
        versions.setdefault(_minor(version), version)
        if versions[_minor(version)] == version:
            candidates[_minor(version)] = sum_
    want = minor or _minor(lock.kubernetes_version)
    if want not in versions:
        raise UsageError(f"--kube-version {want}: no Kubernetes {want} is pinned (pinned: "
                         f"{', '.join(sorted(versions))})",
                         f"add a sources.kubernetes-openapi-{want} entry for {K8S_MODULE} to the lock")
    return versions[want], candidates.get(want)


def _minor(version: str) -> str:
    parts = version.lstrip("v").split(".")
    return ".".join(parts[:2])


def parse_kube_version(text: str) -> str:
    match = re.fullmatch(r"v?(\d+)\.(\d+)(?:\.\d+)?", text.strip())
    if not match:
        raise UsageError(f"--kube-version {text!r} is not a Kubernetes version", "use X.Y, e.g. 1.36")
    return f"{match[1]}.{match[2]}"


def _cache_root() -> Path:
    return paths.cache_dir() / "validate" / f"c{CONVERTER}"


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, separators=(",", ":"), sort_keys=True))
    os.replace(tmp, path)


def builtin_catalog(lock: lockmod.Lock, minor: str | None = None) -> tuple[str, dict]:
    """(Kubernetes version, built-in catalog) from the cache, deriving it on first use."""
    version, expected_sum = _kube_source(lock, minor)
    path = _cache_root() / f"kubernetes-{version}.json"
    try:
        return version, json.loads(path.read_text())
    except (OSError, ValueError):
        pass
    with progress.step(f"deriving built-in schemas from {K8S_MODULE}@{version} (api/openapi-spec/v3)"):
        info = tools.module_info(K8S_MODULE, version)
        zip_path = Path(info["Zip"])
        if expected_sum:
            crds.verify_zip(zip_path, f"{K8S_MODULE}@{version}", expected_sum)
        catalog = builtin.derive(builtin.read_specs(zip_path, f"{K8S_MODULE}@{version}"))
        if not catalog["kinds"]:
            raise UserError(f"{K8S_MODULE}@{version}: no OpenAPI v3 specs under {builtin.SPEC_DIR}")
        _write_json(path, catalog)
    return version, catalog


def crd_catalog(lock: lockmod.Lock) -> list[dict]:
    """Entries (see crds.kinds_of) of every pinned CRD, from the cache or converted now."""
    digest = crds.source_digest(lock)
    path = _cache_root() / f"crds-{digest}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        pass
    with progress.step("converting the pinned CRDs (Trainer, JobSet, LWS, Argo CD, Prometheus Operator) to JSON Schemas"):
        entries = []
        for origin, crd in crds.pinned_crds(lock):
            entries.extend(crds.kinds_of(crd, origin))
        _write_json(path, entries)
    return entries


class Catalog:
    """Lookup and compiled validators for built-in kinds and CRDs."""

    def __init__(self, kube_version: str, builtin_data: dict, crd_entries: list[dict]) -> None:
        self.kube_version = kube_version
        self.defs: dict[str, dict] = builtin_data["defs"]
        self._builtin = builtin_data["kinds"]
        self.kinds: dict[str, KindInfo] = {}
        self._validators: dict[str, Any] = {}
        # Validators of CRDs found among the inputs: compiled on demand, never into the shared cache.
        self._own: dict[str, Any] = {}
        for key, k in self._builtin.items():
            self.kinds[key] = KindInfo(k["apiVersion"], k["kind"], k["group"], k["version"], k["plural"],
                                       k["namespaced"], True, origin=f"Kubernetes {kube_version}")
        self._meta_defs = {name: self.defs[name] for name in self._builtin["v1/ConfigMap"]["defs"]
                           if name.startswith("io.k8s.apimachinery.pkg.apis.meta.v1.")}
        self.groups: set[str] = {k.group for k in self.kinds.values()}
        for entry in crd_entries:
            self.add_crd_entry(entry)

    def fork(self) -> Catalog:
        """A copy that shares compiled validators but registers its own CRDs."""
        clone = Catalog.__new__(Catalog)
        clone.__dict__.update(self.__dict__)
        clone.kinds = dict(self.kinds)
        clone._validators = self._validators if self._validators is not None else {}
        clone._own = {}
        clone.groups = set(self.groups)
        return clone

    # -- CRDs ------------------------------------------------------------------------------
    def add_crd_entry(self, entry: dict, override: bool = False) -> KindInfo | None:
        key = f"{entry['apiVersion']}/{entry['kind']}"
        if key in self.kinds and (self.kinds[key].builtin or not override):
            return None
        info = KindInfo(entry["apiVersion"], entry["kind"], entry["group"], entry["version"], entry["plural"],
                        entry["namespaced"], False, origin=entry.get("origin", ""),
                        structural=entry["structural"], status_subresource=entry.get("status_subresource", False))
        self.kinds[key] = info
        self.groups.add(info.group)
        if override:
            self._own[key] = None  # compiled on demand, never into the shared cache
        return info

    def add_crd(self, crd: dict, origin: str) -> list[KindInfo]:
        """Register a CRD found among the validated documents (it wins over a pinned one)."""
        added = []
        for entry in crds.kinds_of(crd, origin):
            info = self.add_crd_entry(entry, override=True)
            if info:
                added.append(info)
        return added

    # -- lookups ---------------------------------------------------------------------------
    def lookup(self, api_version: str, kind: str) -> KindInfo | None:
        return self.kinds.get(f"{api_version}/{kind}")

    # -- schemas ---------------------------------------------------------------------------
    def json_schema(self, key: str) -> dict:
        """The standalone draft 2020-12 schema of a kind (what kubeconform gets too)."""
        info = self.kinds[key]
        if info.builtin:
            return builtin.schema_for({"defs": self.defs, "kinds": self._builtin}, key)
        if info.schema is None:
            info.schema = crds.to_json_schema({"structural": info.structural, "apiVersion": info.apiVersion,
                                               "kind": info.kind, "status_subresource": info.status_subresource},
                                              f"#/$defs/{OBJECT_META}")
        return {"$schema": "https://json-schema.org/draft/2020-12/schema", **info.schema, "$defs": self._meta_defs}

    def validator(self, key: str):
        """The compiled jsonschema-rs validator of a kind (compiled once per process)."""
        cache = self._own if key in self._own else self._validators
        found = cache.get(key)
        if found is None:
            schema = self.json_schema(key)
            try:
                found = jsonschema_rs.Draft202012Validator(schema, validate_formats=False)
            except Exception as err:  # noqa: BLE001 - a broken CRD schema is the user's finding, not a crash
                found = _Broken(f"the schema of {key} cannot be compiled: {err}")
            cache[key] = found
        return found


class _Broken:
    """Stands in for a validator whose schema did not compile (a malformed CRD in the inputs)."""

    def __init__(self, message: str) -> None:
        self.message = message


_loaded: dict[tuple, Catalog] = {}


def load(lock: lockmod.Lock | None = None, kube_version: str | None = None) -> Catalog:
    """The catalog for a Kubernetes minor (default: the pinned one); loaded once per process and
    handed out as a fork, so CRDs one run registers never leak into the next."""
    lock = lock or lockmod.load()
    key = (str(lock.path), kube_version, crds.source_digest(lock))
    base = _loaded.get(key)
    if base is None:
        version, data = builtin_catalog(lock, kube_version)
        base = _loaded[key] = Catalog(version, data, crd_catalog(lock))
    return base.fork()
