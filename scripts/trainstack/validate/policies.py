"""ValidatingAdmissionPolicies evaluated offline, the way the API server admits a CREATE.

Policies, bindings and their params objects are taken from the validated documents. For
each object and each binding: the policy's matchConstraints and the binding's matchResources
(resource rules, exclusions, namespace and object selectors), the params found through
paramRef (name or selector, parameterNotFoundAction), matchConditions, variables, then the
validations with message/messageExpression; failurePolicy decides what an evaluation error
means, and validationActions Deny gives an error, Warn/Audit a warning.

A policy annotated `trainstack.io/judge-merged: "true"` also judges what a TrainJob's pods will
be: its runtime (found among the documents) with spec.runtimePatches merged the way Trainer
merges them (merge.py), as a TrainingRuntime. The API server sees only the patch; there Pod
Security (the team namespaces enforce `restricted`) judges the pods themselves.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from . import cel, merge, semantics
from .report import ERROR, WARNING, Finding

POLICY_API = "admissionregistration.k8s.io/v1"
_VARIABLES = ["object", "oldObject", "request", "params", "namespaceObject", "variables"]
JUDGE_MERGED = "trainstack.io/judge-merged"

_env: cel.Environment | None = None


def environment() -> cel.Environment:
    global _env
    if _env is None:
        _env = cel.Environment(_VARIABLES)
    return _env


@dataclass
class _Doc:
    file: str
    document: int
    line: int
    data: dict

    @property
    def kind(self) -> str:
        return str(self.data.get("kind", ""))

    @property
    def api_version(self) -> str:
        return str(self.data.get("apiVersion", ""))

    @property
    def meta(self) -> dict:
        meta = self.data.get("metadata")
        return meta if isinstance(meta, dict) else {}

    @property
    def name(self) -> str:
        return str(self.meta.get("name") or "")

    @property
    def namespace(self) -> str:
        return str(self.meta.get("namespace") or "")

    @property
    def labels(self) -> dict:
        labels = self.meta.get("labels")
        return labels if isinstance(labels, dict) else {}


def _dict_at(data: dict, key: str) -> dict:
    """data[key] when it is a mapping, else {} (a malformed field is judged by the schema, not here)."""
    value = data.get(key)
    return value if isinstance(value, dict) else {}


def _finding(doc: _Doc, rule: str, severity: str, message: str, path: str = "") -> Finding:
    return Finding(doc.file, doc.line, doc.document, doc.api_version, doc.kind, doc.namespace, doc.name, rule,
                   severity, message, path)


_OBJECT_PATH = re.compile(r"\b(object|variables)((?:\.[A-Za-z_][A-Za-z0-9_]*|\[\s*'[^']*'\s*\]|\[\s*\"[^\"]*\"\s*\])+)")
_SEGMENT = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[\s*['\"]([^'\"]*)['\"]\s*\]")


def field_read(expression: str, variables: dict[str, str], data: dict, depth: int = 0) -> str:
    """The JSON pointer of the field a validation expression judges: of the fields of the object it reads
    (`object.spec.x`, or through `variables.NAME` those its variable reads), the deepest the object has,
    the first of equals; `object.kind` and `object.apiVersion` are guards, not judged. Where a finding of
    the expression points ("" when it reads no field of the object: the document's line)."""
    best = ""
    for match in _OBJECT_PATH.finditer(expression):
        parts = [a or b for a, b in _SEGMENT.findall(match.group(2))]
        if match.group(1) == "variables":
            inner = variables.get(parts[0]) if parts else None
            found = field_read(inner, variables, data, depth + 1) if inner and depth < 8 else ""
        else:
            found, node = "", data
            for part in parts if parts[:1] not in (["kind"], ["apiVersion"]) else []:
                if not isinstance(node, dict) or part not in node:
                    break
                node = node[part]
                found += "/" + part.replace("~", "~0").replace("/", "~1")
        if found.count("/") > best.count("/"):
            best = found
    return best


def _rule_matches(rule: dict, group: str, version: str, plural: str, namespaced: bool, name: str) -> bool:
    def has(values: Any, value: str) -> bool:
        return isinstance(values, list) and ("*" in values or value in values)

    if not has(rule.get("apiGroups"), group) or not has(rule.get("apiVersions"), version):
        return False
    ops = rule.get("operations") or ["*"]
    if not has(ops, "CREATE"):
        return False
    resources = rule.get("resources") or []
    if not (has(resources, plural) or "*/*" in resources):
        return False
    scope = rule.get("scope") or "*"
    if scope == "Namespaced" and not namespaced or scope == "Cluster" and namespaced:
        return False
    names = rule.get("resourceNames") or []
    return not names or name in names


def _matches(match: Any, doc: _Doc, info, namespaces: dict[str, dict]) -> bool:
    """matchConstraints / matchResources against one object (nil or empty matches everything)."""
    if not isinstance(match, dict) or not match:
        return True
    group, version = info.group, info.version
    rules = match.get("resourceRules")
    if rules is not None and not any(isinstance(r, dict) and _rule_matches(r, group, version, info.plural,
                                                                          info.namespaced, doc.name)
                                     for r in rules):
        return False
    for rule in match.get("excludeResourceRules") or []:
        if isinstance(rule, dict) and _rule_matches(rule, group, version, info.plural, info.namespaced, doc.name):
            return False
    selector = match.get("objectSelector")
    if isinstance(selector, dict) and selector and not semantics.selector_matches(selector, doc.labels):
        return False
    selector = match.get("namespaceSelector")
    if isinstance(selector, dict) and selector:
        if info.namespaced:
            labels = _namespace_labels(doc.namespace or "default", namespaces)
        elif doc.kind == "Namespace" and doc.api_version == "v1":
            labels = doc.labels
        else:
            labels = None  # other cluster-scoped objects are never skipped by a namespaceSelector
        if labels is not None and not semantics.selector_matches(selector, labels):
            return False
    return True


def _namespace_labels(name: str, namespaces: dict[str, dict]) -> dict:
    found = namespaces.get(name)
    labels = dict((found or {}).get("metadata", {}).get("labels") or {})
    labels.setdefault("kubernetes.io/metadata.name", name)
    return labels


def _request(doc: _Doc, info) -> dict:
    gvk = {"group": info.group, "version": info.version, "kind": info.kind}
    gvr = {"group": info.group, "version": info.version, "resource": info.plural}
    return {"kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr, "subResource": "",
            "name": doc.name, "namespace": doc.namespace if info.namespaced else "", "operation": "CREATE",
            "userInfo": {"username": "trainstack-validate", "groups": ["system:authenticated"]},
            "dryRun": True, "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}}


def evaluate(objects: list, catalog) -> list[Finding]:
    """Findings of every binding of every policy over every object (objects: engine.Object list)."""
    docs = [_Doc(o.file, o.document, o.line, o.data) for o in objects if isinstance(o.data, dict)]
    policies = {d.name: d for d in docs if d.kind == "ValidatingAdmissionPolicy" and d.api_version == POLICY_API}
    bindings = [d for d in docs if d.kind == "ValidatingAdmissionPolicyBinding" and d.api_version == POLICY_API]
    namespaces = {d.name: d.data for d in docs if d.kind == "Namespace" and d.api_version == "v1"}
    findings: list[Finding] = []
    env = environment()
    compiled: dict[str, _Compiled] = {}
    for name, policy_doc in policies.items():
        compiled[name] = _Compiled(policy_doc, env, findings)
    merged_docs = _merged_docs(docs, catalog) if any(c.judge_merged for c in compiled.values()) else {}
    for binding in bindings:
        spec = _dict_at(binding.data, "spec")
        policy_name = spec.get("policyName")
        if policy_name not in compiled:
            findings.append(_finding(binding, "policy-config", WARNING,
                                     f"binding {binding.name!r}: policy {policy_name!r} is not among the validated "
                                     "documents, so the binding was not evaluated", "/spec/policyName"))
            continue
        policy = compiled[policy_name]
        actions = spec.get("validationActions") or []
        if not isinstance(actions, list) or not actions:
            findings.append(_finding(binding, "policy-config", ERROR,
                                     "spec.validationActions: Required value: at least one of Deny, Warn, Audit",
                                     "/spec/validationActions"))
            continue
        severity = ERROR if "Deny" in actions else WARNING
        for doc in docs:
            if doc is binding or doc.data is policy.doc.data:
                continue
            info = catalog.lookup(doc.api_version, doc.kind)
            if info is None or not _matches(policy.match, doc, info, namespaces) or not _matches(
                    spec.get("matchResources"), doc, info, namespaces):
                continue
            for params, problem in _params(policy, spec, doc, docs, catalog):
                if problem:
                    findings.append(_finding(doc, "policy", severity, _denied(policy_name, binding.name, problem)))
                    continue
                messages = policy.run(doc, info, params, namespaces)
                merged = merged_docs.get(id(doc.data)) if policy.judge_merged else None
                if merged is not None:  # the merged runtime's fields are not where the TrainJob has them
                    seen = {m for m, _ in messages}
                    prefix = f"TrainingRuntime {doc.name}: "
                    messages += [(f"{merged[2]}: {m.removeprefix(prefix)}", "")
                                 for m, _ in policy.run(merged[0], merged[1], params, namespaces) if m not in seen]
                for message, field in messages:
                    text = _denied(policy_name, binding.name, message)
                    if "Deny" not in actions:
                        text += f" (validationActions: {', '.join(actions)})"
                    findings.append(_finding(doc, "policy", severity, text, field))
    return findings


def _merged_docs(docs: list[_Doc], catalog) -> dict[int, tuple[_Doc, Any, str]]:
    """id(TrainJob data) -> (its runtime with its runtimePatches merged, as a TrainingRuntime named after
    the TrainJob; that kind's info; what to say) for every TrainJob with patches whose runtime is here."""
    runtimes = {(d.kind, d.namespace if d.kind == "TrainingRuntime" else "", d.name): d for d in docs
                if d.kind in ("TrainingRuntime", "ClusterTrainingRuntime") and d.api_version.startswith("trainer.kubeflow.org/")}
    out: dict[int, tuple[_Doc, Any, str]] = {}
    for doc in docs:
        spec = _dict_at(doc.data, "spec")
        if doc.kind != "TrainJob" or not isinstance(spec.get("runtimePatches"), list) or not spec["runtimePatches"]:
            continue
        ref = _dict_at(spec, "runtimeRef")
        kind = str(ref.get("kind") or "ClusterTrainingRuntime")
        runtime = runtimes.get((kind, doc.namespace if kind == "TrainingRuntime" else "", str(ref.get("name") or "")))
        info = catalog.lookup(doc.api_version, "TrainingRuntime")
        if runtime is None or info is None or not isinstance(runtime.data.get("spec"), dict):
            continue
        data = {"apiVersion": doc.api_version, "kind": "TrainingRuntime",
                "metadata": {"name": doc.name, "namespace": doc.namespace or "default"},
                "spec": merge.merged_runtime_spec(runtime.data["spec"], spec)}
        what = (f"the pods of TrainJob {doc.name} (runtime {kind} {runtime.name} with spec.runtimePatches "
                "merged as Trainer merges them)")
        out[id(doc.data)] = (_Doc(doc.file, doc.document, doc.line, data), info, what)
    return out


def _denied(policy: str, binding: str, message: str) -> str:
    return f"ValidatingAdmissionPolicy '{policy}' with binding '{binding}' denied request: {message}"


def _params(policy: _Compiled, spec: dict, doc: _Doc, docs: list[_Doc], catalog) -> list[tuple[Any, str]]:
    """[(params, problem)]: one entry per params object, or (None, '') when the policy has none."""
    param_kind = policy.param_kind
    if not param_kind:
        return [(None, "")]
    ref = spec.get("paramRef")
    if not isinstance(ref, dict):
        return [(None, "no paramRef in the binding although the policy declares a paramKind")]
    api_version, kind = param_kind.get("apiVersion"), param_kind.get("kind")
    info = catalog.lookup(api_version, kind)
    namespaced = info.namespaced if info else bool(ref.get("namespace"))
    namespace = ref.get("namespace") or (doc.namespace or "default" if namespaced else "")
    candidates = [d for d in docs if d.api_version == api_version and d.kind == kind
                  and (not namespaced or (d.namespace or "default") == namespace)]
    if ref.get("name"):
        found = [d for d in candidates if d.name == ref["name"]]
    elif isinstance(ref.get("selector"), dict):
        found = [d for d in candidates if semantics.selector_matches(ref["selector"], d.labels)]
    else:
        found = []
    if not found:
        if ref.get("parameterNotFoundAction") == "Deny":
            where = f"{namespace}/{ref.get('name', '')}" if namespace else str(ref.get("name", ""))
            return [(None, (f"no params found for policy binding with `Deny` parameterNotFoundAction "
                           f"({kind} {where})"))]
        return []
    return [(d.data, "") for d in found]


class _Compiled:
    """A policy's expressions compiled once; compile errors become findings on the policy."""

    def __init__(self, doc: _Doc, env: cel.Environment, findings: list[Finding]) -> None:
        self.doc = doc
        self.env = env
        spec = _dict_at(doc.data, "spec")
        self.match = spec.get("matchConstraints")
        self.param_kind = spec.get("paramKind") if isinstance(spec.get("paramKind"), dict) else None
        self.fail = (spec.get("failurePolicy") or "Fail") == "Fail"
        self.judge_merged = _dict_at(doc.meta, "annotations").get(JUDGE_MERGED) == "true"
        self.conditions = self._list(spec, "matchConditions", "expression", findings)
        self.variables = self._list(spec, "variables", "expression", findings)
        self.validations = self._list(spec, "validations", "expression", findings)
        for entry in self.validations:
            expression = entry["raw"].get("messageExpression")
            entry["message_program"] = self._compile(expression, findings, entry["path"] + "/messageExpression") \
                if isinstance(expression, str) and expression else None

    def _list(self, spec: dict, key: str, field_name: str, findings: list[Finding]) -> list[dict]:
        out = []
        for i, raw in enumerate(spec.get(key) or []):
            if not isinstance(raw, dict) or not isinstance(raw.get(field_name), str):
                continue
            path = f"/spec/{key}/{i}"
            out.append({"raw": raw, "path": path, "program": self._compile(raw[field_name], findings,
                                                                           f"{path}/{field_name}")})
        return out

    def _compile(self, expression: str, findings: list[Finding], path: str):
        if re.search(r"\bauthorizer\b", expression):
            findings.append(_finding(self.doc, "policy-config", WARNING,
                                     f"{path}: uses authorizer, which cannot be evaluated offline; treated as an "
                                     "evaluation error", path))
            return None
        program, error = self.env.compile(expression)
        if program is None:
            findings.append(_finding(self.doc, "policy-config", ERROR,
                                     f"{path}: Invalid value: compilation failed: {error}", path))
        return program

    def run(self, doc: _Doc, info, params: Any, namespaces: dict[str, dict]) -> list[tuple[str, str]]:
        """Violations of doc (empty when admitted): (message, JSON pointer of the field the failing
        expression reads, "" for none)."""
        namespace_object = namespaces.get(doc.namespace) if info.namespaced else None
        if info.namespaced and namespace_object is None:
            namespace_object = {"apiVersion": "v1", "kind": "Namespace",
                                "metadata": {"name": doc.namespace or "default",
                                             "labels": _namespace_labels(doc.namespace or "default", namespaces)}}
        data = {"object": doc.data, "oldObject": None, "request": _request(doc, info), "params": params,
                "namespaceObject": namespace_object, "variables": {}}
        for condition in self.conditions:
            value, error = self._eval(condition["program"], data)
            if error:
                return [(f"matchCondition {condition['raw'].get('name', '')!r} failed: {error}", "")] if self.fail else []
            if value is not True:
                return []
        variables: dict[str, Any] = {}
        broken: dict[str, str] = {}
        for variable in self.variables:
            name = variable["raw"].get("name", "")
            data["variables"] = dict(variables)
            value, error = self._eval(variable["program"], data)
            if error:
                broken[name] = error
            else:
                variables[name] = value
        data["variables"] = variables
        out = []
        for validation in self.validations:
            expression = validation["raw"]["expression"]
            used = [n for n in broken if re.search(rf"\bvariables\.{re.escape(n)}\b", expression)]
            if used:
                value, error = None, f"variables.{used[0]}: {broken[used[0]]}"
            else:
                value, error = self._eval(validation["program"], data)
            field = field_read(expression, self._variable_expressions(), doc.data)
            if error:
                if self.fail:
                    out.append((f"expression '{expression}' resulted in error: {error}", field))
                continue
            if value is True:
                continue
            message = validation["raw"].get("message") or f"failed expression: {expression}"
            if validation.get("message_program") is not None:
                text, err = self._eval(validation["message_program"], data)
                if not err and isinstance(text, str) and text.strip() and "\n" not in text:
                    message = text
            out.append((message, field))
        return out

    def _variable_expressions(self) -> dict[str, str]:
        return {str(v["raw"].get("name", "")): str(v["raw"].get("expression", "")) for v in self.variables}

    def _eval(self, program, data: dict) -> tuple[Any, str]:
        if program is None:
            return None, "the expression could not be compiled or evaluated offline"
        return self.env.evaluate(program, data)
