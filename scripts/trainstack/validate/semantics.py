"""The most common Go validations of built-in kinds that their OpenAPI schemas cannot express.

The API server validates built-in objects with Go code (pkg/apis/*/validation), not with the
OpenAPI schema. This module covers what manifests get wrong most often: pod templates
(containers present, names, images, ports, requests <= limits, template labels), workload
selectors matching template labels, Service ports, ConfigMap/Secret keys and RBAC subjects.
"""

from __future__ import annotations

import re
from typing import Any

from . import cel, formats
from .documents import dotted as _dotted
from .documents import pointer

Issue = tuple[str, str, str]

# Where each workload kind keeps its pod template (JSON path parts).
POD_TEMPLATE = {
    "Deployment": ["spec", "template"], "ReplicaSet": ["spec", "template"], "StatefulSet": ["spec", "template"],
    "DaemonSet": ["spec", "template"], "Job": ["spec", "template"], "ReplicationController": ["spec", "template"],
    "PodTemplate": ["template"], "CronJob": ["spec", "jobTemplate", "spec", "template"],
}
_SELECTOR_KINDS = {"Deployment", "ReplicaSet", "StatefulSet", "DaemonSet"}
_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_SUBJECT_KINDS = {"ServiceAccount", "User", "Group"}
_PULL_POLICIES = ("Always", "IfNotPresent", "Never")
_RESTART_POLICIES = ("Always", "OnFailure", "Never")
_PROTOCOLS = ("TCP", "UDP", "SCTP")


def _get(obj: Any, parts: list) -> Any:
    for part in parts:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


def check(obj: dict, kind: str, api_version: str) -> list[Issue]:
    out: list[Issue] = []
    if kind == "Pod" and api_version == "v1":
        _pod_spec(obj.get("spec"), ["spec"], out)
    elif kind in POD_TEMPLATE:
        base = POD_TEMPLATE[kind]
        template = _get(obj, base)
        if isinstance(template, dict):
            meta = template.get("metadata")
            if isinstance(meta, dict):
                where = _dotted(base + ["metadata"])
                found = (formats.check_labels(meta.get("labels"), f"{where}.labels", "/labels")
                         + formats.check_annotations(meta.get("annotations"), f"{where}.annotations", "/annotations"))
                out.extend(("metadata", pointer(base + ["metadata"]) + sub, message)
                           for sub, message, severity in found if severity == "error")
            _pod_spec(template.get("spec"), base + ["spec"], out)
        if kind in _SELECTOR_KINDS:
            _selector(obj, base, out)
    elif kind == "Service" and api_version == "v1":
        _service(obj, out)
    elif kind in ("ConfigMap", "Secret") and api_version == "v1":
        for field in ("data", "binaryData", "stringData"):
            values = obj.get(field)
            if isinstance(values, dict):
                for key in values:
                    if len(key) > 253 or not _CONFIG_KEY.match(key):
                        out.append(("schema", pointer([field, key]),
                                    (f"{field}[{key}]: Invalid value: {key!r}: a valid config key must consist of "
                                    "alphanumeric characters, '-', '_' or '.' (e.g. 'key.name', or 'KEY_NAME', "
                                    "or 'key-name')")))
    elif kind in ("RoleBinding", "ClusterRoleBinding") and api_version == "rbac.authorization.k8s.io/v1":
        subjects = obj.get("subjects")
        if isinstance(subjects, list):
            for i, subject in enumerate(subjects):
                if isinstance(subject, dict) and subject.get("kind") not in _SUBJECT_KINDS:
                    out.append(("schema", pointer(["subjects", i, "kind"]),
                                (f"subjects[{i}].kind: Unsupported value: {subject.get('kind')!r}: supported values: "
                                '"Group", "ServiceAccount", "User"')))
    return out


def _pod_spec(spec: Any, base: list, out: list[Issue]) -> None:
    if not isinstance(spec, dict):
        return
    _enum(spec, "restartPolicy", _RESTART_POLICIES, base, out)
    containers = spec.get("containers")
    if isinstance(containers, list) and not containers:
        out.append(("required", pointer(base + ["containers"]), f"{_dotted(base + ['containers'])}: Required value"))
    names: dict[str, str] = {}
    for field in ("initContainers", "containers"):
        items = spec.get(field)
        if not isinstance(items, list):
            continue
        for i, container in enumerate(items):
            if not isinstance(container, dict):
                continue
            path = base + [field, i]
            name = container.get("name")
            if isinstance(name, str) and name:
                for msg in formats.dns1123_label(name):
                    out.append(("schema", pointer(path + ["name"]),
                                f"{_dotted(path + ['name'])}: Invalid value: {name!r}: {msg}"))
                if name in names:
                    out.append(("schema", pointer(path + ["name"]),
                                f"{_dotted(path + ['name'])}: Duplicate value: {name!r} (also {names[name]})"))
                names[name] = _dotted(path)
            elif "name" in container:
                out.append(("required", pointer(path + ["name"]), f"{_dotted(path + ['name'])}: Required value"))
            _enum(container, "imagePullPolicy", _PULL_POLICIES, path, out)
            image = container.get("image")
            if not isinstance(image, str) or not image.strip():
                out.append(("required", pointer(path + ["image"]), f"{_dotted(path + ['image'])}: Required value"))
            ports = container.get("ports")
            if isinstance(ports, list):
                for j, port in enumerate(ports):
                    if isinstance(port, dict):
                        _enum(port, "protocol", _PROTOCOLS, path + ["ports", j], out)
                    number = port.get("containerPort") if isinstance(port, dict) else None
                    if isinstance(number, int) and not 1 <= number <= 65535:
                        where = _dotted(path + ["ports", j, "containerPort"])
                        out.append(("schema", pointer(path + ["ports", j, "containerPort"]),
                                    f"{where}: Invalid value: {number}: must be between 1 and 65535, inclusive"))
            _requests_within_limits(container.get("resources"), path + ["resources"], out)


def _enum(obj: dict, name: str, allowed: tuple[str, ...], path: list, out: list[Issue]) -> None:
    value = obj.get(name)
    if isinstance(value, str) and value not in allowed:
        where = _dotted(path + [name])
        supported = ", ".join(f'"{v}"' for v in allowed)
        out.append(("schema", pointer(path + [name]),
                    f"{where}: Unsupported value: \"{value}\": supported values: {supported}"))


def _requests_within_limits(resources: Any, path: list, out: list[Issue]) -> None:
    if not isinstance(resources, dict):
        return
    requests, limits = resources.get("requests"), resources.get("limits")
    if not isinstance(requests, dict) or not isinstance(limits, dict):
        return
    for name, request in requests.items():
        if name not in limits:
            continue
        try:
            low, high = cel.parse_quantity(str(request)), cel.parse_quantity(str(limits[name]))
        except cel.CelError:
            continue  # the schema pattern reports malformed quantities
        if low > high:
            where = _dotted(path + ["requests", name])
            out.append(("quantity", pointer(path + ["requests", name]),
                        (f"{where}: Invalid value: {str(request)!r}: must be less than or equal to {name} limit of "
                        f"{limits[name]}")))


def selector_matches(selector: dict, labels: dict) -> bool:
    """A metav1.LabelSelector against a label set (matchLabels and matchExpressions)."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        if not isinstance(expr, dict):
            return False
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _selector(obj: dict, base: list, out: list[Issue]) -> None:
    selector = _get(obj, ["spec", "selector"])
    labels = _get(obj, base + ["metadata", "labels"]) or {}
    if not isinstance(selector, dict):
        return
    if not selector.get("matchLabels") and not selector.get("matchExpressions"):
        out.append(("required", "/spec/selector", ("spec.selector: Invalid value: empty selector is invalid for "
                                                  f"{obj.get('kind')}")))
        return
    if isinstance(labels, dict) and not selector_matches(selector, labels):
        where = _dotted(base + ["metadata", "labels"])
        out.append(("schema", pointer(base + ["metadata", "labels"]),
                    f"{where}: Invalid value: {labels!r}: `selector` does not match template `labels`"))


def _service(obj: dict, out: list[Issue]) -> None:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    kind = spec.get("type", "ClusterIP")
    ports = spec.get("ports")
    if kind != "ExternalName" and spec.get("clusterIP") != "None" and not ports:
        out.append(("required", "/spec/ports", "spec.ports: Required value"))
    if isinstance(ports, list):
        for i, port in enumerate(ports):
            number = port.get("port") if isinstance(port, dict) else None
            if isinstance(number, int) and not 1 <= number <= 65535:
                out.append(("schema", pointer(["spec", "ports", i, "port"]),
                            f"spec.ports[{i}].port: Invalid value: {number}: must be between 1 and 65535, inclusive"))
            if isinstance(port, dict) and len(ports) > 1 and not port.get("name"):
                out.append(("required", pointer(["spec", "ports", i, "name"]),
                            f"spec.ports[{i}].name: Required value"))
