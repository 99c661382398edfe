"""Built-in kinds: JSON Schemas derived from the pinned Kubernetes release's OpenAPI v3 spec.

The spec files (`api/openapi-spec/v3/*.json`) are read from the `k8s.io/kubernetes` module zip
(verified against its h1: sum), so no schema is committed and every Kubernetes version we
validate against is one the lock names. The conversion mirrors what the API server does with
a built-in object: strict decoding (unknown fields rejected), int32/int64 ranges, RFC 3339
times, base64 bytes, quantities and int-or-string values.
"""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path
from typing import Any

from . import formats

SPEC_DIR = "api/openapi-spec/v3/"
_REF = "#/components/schemas/"
_PATH = re.compile(r"^/apis?/(?:(?P<group>[^/{}]+)/)?(?P<version>v[^/{}]+)/(?P<ns>namespaces/\{namespace\}/)?"
                   r"(?P<plural>[^/{}]+)$")

# Kinds whose OpenAPI schema says less than the API server's Go types: value formats by def name.
_DEF_OVERRIDES: dict[str, dict[str, Any]] = {
    "io.k8s.apimachinery.pkg.api.resource.Quantity": {
        "type": ["string", "number"], "pattern": formats.QUANTITY_PATTERN},
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {"type": ["integer", "string"]},
    "io.k8s.apimachinery.pkg.apis.meta.v1.Time": {"type": "string", "pattern": formats.RFC3339_PATTERN},
    "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime": {"type": "string", "pattern": formats.RFC3339_PATTERN},
}


def read_specs(zip_path: Path, module_prefix: str) -> dict[str, dict]:
    """{file name: parsed OpenAPI v3 document} from the module zip."""
    prefix = f"{module_prefix}/{SPEC_DIR}"
    out = {}
    with zipfile.ZipFile(zip_path) as archive:
        for name in archive.namelist():
            if name.startswith(prefix) and name.endswith("_openapi.json"):
                out[name[len(prefix):]] = json.loads(archive.read(name))
    return out


def derive(specs: dict[str, dict]) -> dict[str, Any]:
    """The built-in catalog: {"defs": {...}, "kinds": {"apiVersion/Kind": {...}}}."""
    components: dict[str, dict] = {}
    kinds: dict[str, dict] = {}
    for spec in specs.values():
        components.update(spec.get("components", {}).get("schemas", {}))
    for spec in specs.values():
        for path, item in spec.get("paths", {}).items():
            post = item.get("post") if isinstance(item, dict) else None
            match = _PATH.match(path)
            if not post or not match or post.get("x-kubernetes-action") != "post":
                continue
            gvk = post.get("x-kubernetes-group-version-kind") or {}
            group, version, kind = gvk.get("group", ""), gvk.get("version", ""), gvk.get("kind", "")
            if (group or "") != (match["group"] or "") or version != match["version"]:
                continue  # a subresource or a kind served elsewhere (Binding, Eviction)
            api_version = f"{group}/{version}" if group else version
            root = _root_def(components, group, version, kind)
            if root is None:
                continue
            key = f"{api_version}/{kind}"
            entry = kinds.setdefault(key, {"apiVersion": api_version, "kind": kind, "group": group,
                                           "version": version, "plural": match["plural"], "namespaced": False,
                                           "def": root})
            entry["namespaced"] = entry["namespaced"] or bool(match["ns"])
    reachable = _reachable(components, [k["def"] for k in kinds.values()])
    defs = {name: _convert(components[name], name) for name in sorted(reachable)}
    for kind in kinds.values():
        kind["defs"] = sorted(_reachable(components, [kind["def"]]))
    return {"defs": defs, "kinds": dict(sorted(kinds.items()))}


def _root_def(components: dict, group: str, version: str, kind: str) -> str | None:
    for name, schema in components.items():
        for gvk in schema.get("x-kubernetes-group-version-kind", []):
            if gvk.get("group", "") == group and gvk.get("version") == version and gvk.get("kind") == kind:
                return name
    return None


def _refs(node: Any, out: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(_REF):
            out.add(ref[len(_REF):])
        for value in node.values():
            _refs(value, out)
    elif isinstance(node, list):
        for value in node:
            _refs(value, out)


def _reachable(components: dict, roots: list[str]) -> set[str]:
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen or name not in components:
            continue
        seen.add(name)
        found: set[str] = set()
        _refs(components[name], found)
        todo.extend(found - seen)
    return seen


def _convert(node: dict, def_name: str = "") -> dict:
    """One OpenAPI v3 schema -> draft 2020-12, strict (additionalProperties: false)."""
    if def_name in _DEF_OVERRIDES:
        return dict(_DEF_OVERRIDES[def_name])
    all_of = node.get("allOf")
    if "$ref" in node:
        return {"$ref": "#/$defs/" + node["$ref"][len(_REF):]}
    if isinstance(all_of, list) and len(all_of) == 1 and "$ref" in all_of[0] and "properties" not in node:
        return {"$ref": "#/$defs/" + all_of[0]["$ref"][len(_REF):]}
    out: dict[str, Any] = {}
    kind = node.get("type")
    if node.get("x-kubernetes-int-or-string") or node.get("format") == "int-or-string":
        return {"type": ["integer", "string"]}
    if kind:
        out["type"] = kind
    if "enum" in node:
        out["enum"] = node["enum"]
    fmt = node.get("format")
    if kind == "integer" and fmt in formats.INT_RANGES:
        out["minimum"], out["maximum"] = formats.INT_RANGES[fmt]
    elif kind == "string" and fmt == "byte":
        out["pattern"] = formats.BASE64_PATTERN
    elif kind == "string" and fmt == "date-time":
        out["pattern"] = formats.RFC3339_PATTERN
    for key in ("pattern", "minLength", "maxLength", "minimum", "maximum", "minItems", "maxItems"):
        if key in node and key not in out:
            out[key] = node[key]
    if "properties" in node:
        out["properties"] = {k: _convert(v) for k, v in node["properties"].items()}
        if not node.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = _convert(node["additionalProperties"])
    if isinstance(node.get("items"), dict):
        out["items"] = _convert(node["items"])
    if node.get("required"):
        out["required"] = list(node["required"])
    for junctor in ("oneOf", "anyOf", "allOf"):
        if isinstance(node.get(junctor), list) and junctor not in out and not (junctor == "allOf" and "$ref" in out):
            branches = [_convert(b) for b in node[junctor]]
            if junctor == "oneOf" and all(set(b) == {"type"} for b in branches):
                out["type"] = [b["type"] for b in branches]
            else:
                out[junctor] = branches
    return out


def schema_for(catalog: dict[str, Any], key: str) -> dict:
    """A standalone draft 2020-12 schema for one kind (its reachable defs bundled)."""
    kind = catalog["kinds"][key]
    defs = {name: catalog["defs"][name] for name in kind["defs"]}
    root = dict(defs[kind["def"]])
    props = dict(root.get("properties", {}))
    # apiVersion and kind must name this kind; metadata is checked by formats as well
    props["apiVersion"] = {"type": "string", "enum": [kind["apiVersion"]]}
    props["kind"] = {"type": "string", "enum": [kind["kind"]]}
    root["properties"] = props
    root["required"] = sorted(set(root.get("required", [])) | {"apiVersion", "kind"})
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **root, "$defs": defs}
