"""Custom resources: the pinned CRDs, and their structural schemas as JSON Schemas.

Where the CRDs come from (never from git): the Trainer CRDs that `trainstack deps` writes to
charts/trainstack/crds/, the `crds/` folders inside the vendored JobSet and LWS chart archives,
Argo CD's `manifests/crds/` and the Prometheus Operator's ServiceMonitor, PodMonitor and
PrometheusRule CRDs, read straight from their pinned, h1-verified module zips.

The JSON Schema mirrors what the API server does with a custom resource on create:
unknown fields are rejected (strict field validation after pruning), int-or-string,
`nullable`, `x-kubernetes-preserve-unknown-fields`, `x-kubernetes-embedded-resource`,
list-type set uniqueness, int32/int64 ranges and the formats kube-openapi checks. Nulls of
non-nullable fields and defaults are handled before schema validation (see structural.py),
exactly as the API server prunes and defaults before it validates.
"""

from __future__ import annotations

import copy
import hashlib
import tarfile
import zipfile
from pathlib import Path
from typing import Any

from .. import chartpack, deps, paths, tools, yamlio
from .. import lock as lockmod
from ..errors import UserError
from ..jsontypes import dig
from . import formats

# The structural keywords the Python walker (defaults, list maps, CEL, embedded resources) reads.
_KEEP = {"type", "properties", "items", "additionalProperties", "default", "nullable", "required",
         "x-kubernetes-validations", "x-kubernetes-list-type", "x-kubernetes-list-map-keys",
         "x-kubernetes-embedded-resource", "x-kubernetes-preserve-unknown-fields", "x-kubernetes-int-or-string",
         "allOf", "anyOf", "oneOf", "not"}
_FORMAT_PATTERNS = {"date-time": formats.CRD_DATETIME_PATTERN, "datetime": formats.CRD_DATETIME_PATTERN,
                    "date": formats.CRD_DATE_PATTERN, "byte": formats.BASE64_PATTERN,
                    "uuid": formats.UUID_PATTERN, "ipv4": formats.IPV4_PATTERN}
_VERBATIM = {"default", "enum", "x-kubernetes-validations", "x-kubernetes-list-map-keys", "required"}
_VALUE_KEYS = ("enum", "pattern", "minLength", "maxLength", "minimum", "maximum", "minItems", "maxItems",
               "minProperties", "maxProperties", "multipleOf")


# ----------------------------------------------------------------------------- sources
def _chart_archives(lock: lockmod.Lock) -> list[Path]:
    chart = paths.chart_dir()
    return [chart / "charts" / f"{pin.name}-{pin.version}.tgz" for pin in lock.charts() if pin.name in ("jobset", "lws")]


# CRDs read straight from a pinned `sources` module zip: folder, and the files to take (all when empty).
# Of the Prometheus Operator's, only the kinds the chart ships (the others are large and unused).
_ZIPPED_CRDS = {
    "argocd": ("manifests/crds/", ()),
    "prometheus-operator": ("example/prometheus-operator-crd/", (
        "monitoring.coreos.com_servicemonitors.yaml", "monitoring.coreos.com_podmonitors.yaml",
        "monitoring.coreos.com_prometheusrules.yaml")),
}


def _source_zip(lock: lockmod.Lock, name: str) -> tuple[Path, str]:
    source = lock.source(name)
    info = tools.module_info(source.module, source.version)
    return Path(info["Zip"]), f"{source.module}@{source.version}"


def source_digest(lock: lockmod.Lock) -> str:
    """Changes whenever a pinned CRD could change (the cache key of converted CRD schemas)."""
    deps.ensure(lock)
    digest = hashlib.sha256()
    for path in sorted((paths.chart_dir() / "crds").glob("*.yaml")) + _chart_archives(lock):
        digest.update(path.name.encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    for name in _ZIPPED_CRDS:
        source = lock.source(name)
        digest.update(f"{source.module}@{source.version} {source.sum}".encode())
    return digest.hexdigest()[:16]


def pinned_crds(lock: lockmod.Lock) -> list[tuple[str, dict]]:
    """(origin, CRD) for every pinned CRD: Trainer, JobSet, LWS, Argo CD, Prometheus Operator."""
    deps.ensure(lock)
    found: list[tuple[str, dict]] = []
    for path in sorted((paths.chart_dir() / "crds").glob("*.yaml")):
        found.extend((f"charts/trainstack/crds/{path.name}", d) for d in _crd_docs(path.read_text()))
    for archive in _chart_archives(lock):
        with tarfile.open(archive) as tar:
            for member in sorted(tar.getmembers(), key=lambda m: m.name):
                parts = member.name.split("/")
                if not (member.isfile() and len(parts) == 3 and parts[1] == "crds"
                        and member.name.endswith((".yaml", ".yml"))):
                    continue
                content = tar.extractfile(member)
                if content is not None:  # always so for a regular file
                    found.extend((f"{archive.name}:{member.name}", d) for d in _crd_docs(content.read().decode()))
    for source_name, (folder, only) in _ZIPPED_CRDS.items():
        zip_path, label = _source_zip(lock, source_name)
        verify_zip(zip_path, label, lock.source(source_name).sum)
        with zipfile.ZipFile(zip_path) as zipped:
            prefix = f"{label}/{folder}"
            for name in sorted(zipped.namelist()):
                if name.startswith(prefix) and name.endswith(".yaml") and (not only or name[len(prefix):] in only):
                    found.extend((f"{label}:{name[len(label) + 1:]}", d) for d in _crd_docs(zipped.read(name).decode()))
    if not found:
        raise UserError("no pinned CRDs were found", "run 'trainstack deps'")
    return found


def verify_zip(zip_path: Path, label: str, expected: str) -> None:
    """Check a module zip against its h1: sum (remembered per zip size and mtime, so it is hashed once)."""
    stat = zip_path.stat()
    marker = paths.cache_dir() / "validate" / "verified" / hashlib.sha256(
        f"{zip_path}:{stat.st_size}:{stat.st_mtime_ns}:{expected}".encode()).hexdigest()
    if marker.is_file():
        return
    actual = chartpack.module_h1(zip_path)
    if actual != expected:
        raise UserError(f"checksum mismatch for {label}: lock says {expected}, the module zip hashes to {actual}",
                        "do not use this module; check the lock file")
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(f"{label} {expected}\n")


def _crd_docs(text: str) -> list[dict]:
    return [d for d in yamlio.load_all(text)
            if isinstance(d, dict) and d.get("kind") == "CustomResourceDefinition"]


# ----------------------------------------------------------------------------- conversion
def kinds_of(crd: dict, origin: str) -> list[dict[str, Any]]:
    """One catalog entry per served version of a CRD (skips CRDs too malformed to use)."""
    spec = crd.get("spec") if isinstance(crd, dict) else None
    if not isinstance(spec, dict):
        return []
    names = spec.get("names") or {}
    group = spec.get("group")
    kind = names.get("kind")
    if not isinstance(group, str) or not isinstance(kind, str):
        return []
    out = []
    top_schema = dig(spec, "validation", "openAPIV3Schema")
    for version in spec.get("versions") or []:
        if not isinstance(version, dict) or not version.get("served", True) or not isinstance(version.get("name"), str):
            continue
        schema = dig(version, "schema", "openAPIV3Schema") or top_schema or {"type": "object",
                                                                             "x-kubernetes-preserve-unknown-fields": True}
        subresources = version.get("subresources") or spec.get("subresources") or {}
        out.append({
            "apiVersion": f"{group}/{version['name']}",
            "kind": kind,
            "group": group,
            "version": version["name"],
            "plural": names.get("plural") or kind.lower() + "s",
            "namespaced": spec.get("scope", "Namespaced") == "Namespaced",
            "origin": origin,
            "crd": dig(crd, "metadata", "name", default=""),
            "status_subresource": "status" in subresources,
            "structural": strip(schema),
        })
    return out


def strip(schema: Any) -> Any:
    """The schema without descriptions and other keys no check reads (smaller cache, faster loads)."""
    if isinstance(schema, dict):
        out = {}
        for key, value in schema.items():
            if key == "properties" and isinstance(value, dict):
                out[key] = {k: strip(v) for k, v in value.items()}
            elif key in _VERBATIM:
                out[key] = value
            elif key in _KEEP or key in _VALUE_KEYS or key in ("format", "exclusiveMinimum", "exclusiveMaximum"):
                out[key] = strip(value)
        return out
    if isinstance(schema, list):
        return [strip(x) for x in schema]
    return schema


def to_json_schema(entry: dict[str, Any], object_meta_ref: str = "#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
                   ) -> dict:
    """Draft 2020-12 schema of one served CRD version (the ObjectMeta $defs are added by the caller)."""
    root = _node(entry["structural"], structural=True)
    props = dict(root.get("properties", {}))
    meta_constraints = _node(entry["structural"].get("properties", {}).get("metadata", {}), structural=False)
    meta_constraints.pop("type", None)
    props["metadata"] = {"$ref": object_meta_ref, **({"allOf": [meta_constraints]} if meta_constraints else {})}
    props["apiVersion"] = {"type": "string", "enum": [entry["apiVersion"]]}
    props["kind"] = {"type": "string", "enum": [entry["kind"]]}
    if entry.get("status_subresource"):
        # status is reset on create when the status subresource is on: only its shape matters
        props["status"] = {}
    root["properties"] = props
    root["type"] = "object"
    root["required"] = sorted(set(root.get("required", [])) | {"apiVersion", "kind"})
    if not entry["structural"].get("x-kubernetes-preserve-unknown-fields"):
        root["additionalProperties"] = False
    root.pop("uniqueItems", None)
    return root


def _node(s: Any, structural: bool) -> dict:
    if not isinstance(s, dict):
        return {}
    out: dict[str, Any] = {}
    kind = s.get("type")
    nullable = bool(s.get("nullable"))
    if s.get("x-kubernetes-int-or-string"):
        types: list[str] = ["integer", "string"]
    elif kind:
        types = [kind]
    else:
        types = []
    if types:
        if nullable:
            types.append("null")
        out["type"] = types[0] if len(types) == 1 else types
    for key in _VALUE_KEYS:
        if key in s:
            out[key] = copy.deepcopy(s[key])
    if nullable and "enum" in out and None not in out["enum"]:
        out["enum"].append(None)
    if s.get("exclusiveMinimum") is True and "minimum" in out:
        out["exclusiveMinimum"] = out.pop("minimum")
    if s.get("exclusiveMaximum") is True and "maximum" in out:
        out["exclusiveMaximum"] = out.pop("maximum")
    fmt = s.get("format")
    if fmt in formats.INT_RANGES and (kind == "integer" or s.get("x-kubernetes-int-or-string")):
        low, high = formats.INT_RANGES[fmt]
        out.setdefault("minimum", low)
        out.setdefault("maximum", high)
    elif fmt in _FORMAT_PATTERNS and kind == "string":
        out["allOf"] = out.get("allOf", []) + [{"pattern": _FORMAT_PATTERNS[fmt]}]
    if s.get("x-kubernetes-list-type") == "set":
        out["uniqueItems"] = True
    props = s.get("properties") if isinstance(s.get("properties"), dict) else None
    addl = s.get("additionalProperties")
    preserve = bool(s.get("x-kubernetes-preserve-unknown-fields"))
    embedded = bool(s.get("x-kubernetes-embedded-resource"))
    if props is not None:
        out["properties"] = {k: _node(v, structural) for k, v in props.items()}
    if isinstance(addl, dict):
        out["additionalProperties"] = _node(addl, structural)
    required = [r for r in s.get("required", []) or []
                if isinstance(r, str) and not (props and isinstance(props.get(r), dict) and "default" in props[r])]
    if embedded and structural:
        emb = out.setdefault("properties", {})
        emb.setdefault("apiVersion", {"type": "string", "minLength": 1})
        emb.setdefault("kind", {"type": "string", "minLength": 1})
        emb.setdefault("metadata", {"$ref": "#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"})
        required = sorted(set(required) | {"apiVersion", "kind"})
    if required:
        out["required"] = required
    if structural and kind == "object" and not preserve and addl is None or (structural and addl is False):
        out["additionalProperties"] = False
    if isinstance(s.get("items"), dict):
        out["items"] = _node(s["items"], structural)
    for junctor in ("allOf", "anyOf", "oneOf"):
        if isinstance(s.get(junctor), list):
            out[junctor] = out.get(junctor, []) + [_node(b, False) for b in s[junctor]]
    if isinstance(s.get("not"), dict):
        out["not"] = _node(s["not"], False)
    if nullable and len(out) > 1:
        # a nullable value skips every other check when it is null
        out = {"anyOf": [{"type": "null"}, {k: v for k, v in out.items()}]} if "type" not in out else out
    return out
