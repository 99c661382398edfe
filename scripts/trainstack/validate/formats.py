"""The value formats the API server enforces outside OpenAPI: names, labels, annotations, quantities.

Each check returns sentences (empty when valid) in the API server's own wording, so a finding
reads like what `kubectl apply` would have said. Patterns used inside JSON Schemas live here too,
so one module owns every format.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .. import quantity as quantity_module

# -- patterns used inside the generated JSON Schemas (Rust regex syntax) -----------------------
QUANTITY_PATTERN = r"^[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+|[KMGTPE]i|[numkMGTPE])?$"
RFC3339_PATTERN = (r"^[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])T(?:[01][0-9]|2[0-3]):[0-5][0-9]:"
                   r"(?:[0-5][0-9]|60)(?:\.[0-9]+)?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])$")
# kube-openapi's date-time (CRDs): a lowercase t/z is fine and the fraction may follow any char
CRD_DATETIME_PATTERN = (r"^[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])[Tt](?:[01][0-9]|2[0-3]):[0-5][0-9]:"
                        r"[0-5][0-9](?:.[0-9]+)?(?:[Zz]|[+-][0-9]{2}:[0-9]{2})$")
CRD_DATE_PATTERN = r"^[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])$"
BASE64_PATTERN = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
UUID_PATTERN = r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$"
IPV4_PATTERN = r"^(?:[0-9]{1,3}\.){3}[0-9]{1,3}$"
INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}

# -- names ---------------------------------------------------------------------------------------
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_QUANTITY = re.compile(QUANTITY_PATTERN)

LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
             "start and end with an alphanumeric character (e.g. 'my-name', or '123-abc')")
SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                 "and must start and end with an alphanumeric character (e.g. 'example.com')")
DNS1035_MSG = ("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
               "alphabetic character, and end with an alphanumeric character (e.g. 'my-name', or 'abc-123')")
QUALIFIED_MSG = ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
                 "an alphanumeric character (e.g. 'MyName', or 'my.name', or '123-abc')")
LABEL_VALUE_MSG = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
                   "and must start and end with an alphanumeric character (e.g. 'MyValue', or 'my_value', or '12345')")
TOTAL_ANNOTATION_SIZE = 256 * 1024
STANDARD_FINALIZERS = {"orphan", "foregroundDeletion", "kubernetes"}


def _q(value: Any) -> str:
    """A value quoted the way the API server's messages quote it (Go %q)."""
    return json.dumps(value, ensure_ascii=False)


def dns1123_label(value: str) -> list[str]:
    errs = []
    if len(value) > 63:
        errs.append("must be no more than 63 characters")
    if not _LABEL.match(value):
        errs.append(LABEL_MSG)
    return errs


def dns1123_subdomain(value: str) -> list[str]:
    errs = []
    if len(value) > 253:
        errs.append("must be no more than 253 characters")
    if not _SUBDOMAIN.match(value):
        errs.append(SUBDOMAIN_MSG)
    return errs


def dns1035_label(value: str) -> list[str]:
    errs = []
    if len(value) > 63:
        errs.append("must be no more than 63 characters")
    if not _DNS1035.match(value):
        errs.append(DNS1035_MSG)
    return errs


def path_segment(value: str) -> list[str]:
    if value in (".", ".."):
        return [f"may not be '{value}'"]
    return [f"may not contain '{c}'" for c in ("/", "%") if c in value]


_memo: dict[tuple, list[str]] = {}


def _memoized(fn):
    """Names repeat across documents: remember each answer (bounded)."""
    def wrapper(value: str) -> list[str]:
        key = (fn, value)
        found = _memo.get(key)
        if found is None:
            found = fn(value)
            if len(_memo) < 100_000:
                _memo[key] = found
        return found
    wrapper.__doc__ = fn.__doc__
    wrapper.__name__ = fn.__name__
    return wrapper


@_memoized
def qualified_name(value: str) -> list[str]:
    """A label or annotation key: [prefix/]name, prefix a DNS subdomain, name <= 63 characters."""
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
        errs: list[str] = []
    elif len(parts) == 2:
        prefix, name = parts
        errs = ["prefix part must be non-empty"] if not prefix else ["prefix part " + e for e in
                                                                     dns1123_subdomain(prefix)]
    else:
        return [("a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
                "with an alphanumeric character, with an optional DNS subdomain prefix and '/' (e.g. "
                "'example.com/MyName')")]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part must be no more than 63 characters")
    if name and not _QUALIFIED_NAME.match(name):
        errs.append(QUALIFIED_MSG)
    return errs


@_memoized
def label_value(value: str) -> list[str]:
    errs = []
    if len(value) > 63:
        errs.append("must be no more than 63 characters")
    if not _LABEL_VALUE.match(value):
        errs.append(LABEL_VALUE_MSG)
    return errs


def quantity(value: Any) -> list[str]:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return ["quantities must be strings or numbers"]
    if isinstance(value, str) and not _QUANTITY.match(value):
        return [quantity_module.not_a_quantity(value)]
    return []


# Name rules of built-in kinds whose names are not plain DNS-1123 subdomains (pkg/apis/*/validation).
NAME_RULES = {
    "Namespace": dns1123_label,
    "Service": dns1035_label,
    "Role": path_segment,
    "ClusterRole": path_segment,
    "RoleBinding": path_segment,
    "ClusterRoleBinding": path_segment,
}


def name_rule(kind: str, builtin: bool, kube_minor: int = 99):
    """The name check of a kind; Service names are DNS labels from 1.36 (RelaxedServiceNameValidation)."""
    if not builtin:
        return dns1123_subdomain
    if kind == "Service" and kube_minor >= 36:
        return dns1123_label
    return NAME_RULES.get(kind, dns1123_subdomain)


def _mask_trailing_dash(value: str) -> str:
    return value[:-1] + "a" if len(value) > 1 and value.endswith("-") else value


def check_metadata(meta: Any, kind: str, builtin: bool, namespaced: bool, root: bool = True,
                   name_check=None, kube_minor: int = 99) -> list[tuple[str, str, str]]:
    """(JSON pointer below metadata, message, severity) for what ValidateObjectMeta rejects."""
    out: list[tuple[str, str, str]] = []
    if not isinstance(meta, dict):
        if root:
            out.append(("", "metadata.name: Required value: name or generateName is required", "error"))
        return out
    name = meta.get("name")
    generate = meta.get("generateName")
    rule = name_check or name_rule(kind, builtin, kube_minor)
    if root and not name and not generate:
        out.append(("/name", "metadata.name: Required value: name or generateName is required", "error"))
    if isinstance(generate, str) and generate:
        for msg in (rule(_mask_trailing_dash(generate)) if rule is not path_segment else path_segment(generate)):
            out.append(("/generateName", f"metadata.generateName: Invalid value: {_q(generate)}: {msg}", "error"))
    if isinstance(name, str) and name:
        for msg in rule(name):
            out.append(("/name", f"metadata.name: Invalid value: {_q(name)}: {msg}", "error"))
    namespace = meta.get("namespace")
    if namespaced and isinstance(namespace, str) and namespace:
        for msg in dns1123_label(namespace):
            out.append(("/namespace", f"metadata.namespace: Invalid value: {_q(namespace)}: {msg}", "error"))
    out.extend(check_labels(meta.get("labels"), "metadata.labels", "/labels"))
    out.extend(check_annotations(meta.get("annotations"), "metadata.annotations", "/annotations"))
    finalizers = meta.get("finalizers")
    if isinstance(finalizers, list):
        for i, fin in enumerate(finalizers):
            if not isinstance(fin, str):
                continue
            for msg in qualified_name(fin):
                out.append((f"/finalizers/{i}", f"metadata.finalizers[{i}]: Invalid value: {_q(fin)}: {msg}",
                            "error" if builtin else "warning"))
            if "/" not in fin and fin not in STANDARD_FINALIZERS:
                out.append((f"/finalizers/{i}", (f"metadata.finalizers[{i}]: Invalid value: {_q(fin)}: name is neither "
                            "a standard finalizer name nor is it fully qualified"), "error" if builtin else "warning"))
    return out


def check_labels(labels: Any, where: str, pointer: str) -> list[tuple[str, str, str]]:
    out: list[tuple[str, str, str]] = []
    if not isinstance(labels, dict):
        return out
    for key, value in labels.items():
        esc = key.replace("~", "~0").replace("/", "~1")
        for msg in qualified_name(key):
            out.append((f"{pointer}/{esc}", f"{where}: Invalid value: {_q(key)}: label key: {msg}", "error"))
        if isinstance(value, str):
            for msg in label_value(value):
                out.append((f"{pointer}/{esc}", f"{where}[{key}]: Invalid value: {_q(value)}: {msg}", "error"))
    return out


def check_annotations(annotations: Any, where: str, pointer: str) -> list[tuple[str, str, str]]:
    out: list[tuple[str, str, str]] = []
    if not isinstance(annotations, dict):
        return out
    total = 0
    for key, value in annotations.items():
        esc = key.replace("~", "~0").replace("/", "~1")
        for msg in qualified_name(key.lower()):
            out.append((f"{pointer}/{esc}", f"{where}: Invalid value: {_q(key)}: annotation key: {msg}", "error"))
        total += len(key.encode()) + (len(value.encode()) if isinstance(value, str) else 0)
    if total > TOTAL_ANNOTATION_SIZE:
        out.append((pointer, (f"{where}: Too long: may not be more than {TOTAL_ANNOTATION_SIZE} bytes "
                    f"(the annotations take {total})"), "error"))
    return out
