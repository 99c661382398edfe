"""What the API server does to a custom resource around its OpenAPI validation, in its order.

Before validating, it prunes `null`s of non-nullable fields (or defaults them) and applies the
schema's defaults; after, it checks x-kubernetes-list-type map uniqueness, embedded resources,
and evaluates the create-time `x-kubernetes-validations` CEL rules. A per-kind plan keeps only
the schema nodes where one of these applies, so objects are walked only where it matters.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

from . import cel, formats
from .documents import dotted, pointer


@dataclass
class Rule:
    """One x-kubernetes-validations entry, compiled."""

    rule: str
    message: str
    message_expression: str
    field_path: str
    reason: str
    program: Any
    compile_error: str = ""


@dataclass
class Plan:
    """The parts of a structural schema node that need Python: defaults, list maps, rules."""

    props: dict[str, Plan] = field(default_factory=dict)
    addl: Plan | None = None
    items: Plan | None = None
    defaults: dict[str, Any] = field(default_factory=dict)
    list_map_keys: list[str] | None = None
    item_defaults: dict[str, Any] = field(default_factory=dict)
    embedded: bool = False
    rules: list[Rule] = field(default_factory=list)


_env: cel.Environment | None = None


def environment() -> cel.Environment:
    global _env
    if _env is None:
        _env = cel.Environment(["self", "oldSelf"])
    return _env


def build_plan(schema: Any, root: bool = True) -> Plan | None:
    """The plan of a schema node, or None when nothing below it needs Python."""
    if not isinstance(schema, dict):
        return None
    plan = Plan()
    useful = False
    for name, sub in (schema.get("properties") or {}).items():
        if root and name == "status":
            continue  # reset on create; rules there never run on create
        if isinstance(sub, dict) and "default" in sub:
            plan.defaults[name] = sub["default"]
            useful = True
        child = build_plan(sub, root=False)
        if child is not None:
            plan.props[name] = child
            useful = True
    if isinstance(schema.get("additionalProperties"), dict):
        plan.addl = build_plan(schema["additionalProperties"], root=False)
        useful = useful or plan.addl is not None
    if isinstance(schema.get("items"), dict):
        items = schema["items"]
        plan.items = build_plan(items, root=False)
        useful = useful or plan.items is not None
        if schema.get("x-kubernetes-list-type") == "map":
            plan.list_map_keys = [k for k in schema.get("x-kubernetes-list-map-keys") or [] if isinstance(k, str)]
            plan.item_defaults = {k: v.get("default") for k, v in (items.get("properties") or {}).items()
                                  if isinstance(v, dict) and "default" in v}
            useful = True
    if schema.get("x-kubernetes-embedded-resource"):
        plan.embedded = True
        useful = True
    for entry in schema.get("x-kubernetes-validations") or []:
        if not isinstance(entry, dict) or not isinstance(entry.get("rule"), str):
            continue
        text = entry["rule"]
        if cel.uses_old_self(text) and not entry.get("optionalOldSelf"):
            continue  # a transition rule: only runs on update
        source = f"cel.bind(oldSelf, optional.none(), {text})" if cel.uses_old_self(text) else text
        program, error = environment().compile(source)
        plan.rules.append(Rule(text, str(entry.get("message") or ""), str(entry.get("messageExpression") or ""),
                               str(entry.get("fieldPath") or ""), str(entry.get("reason") or "FieldValueInvalid"),
                               program, error))
        useful = True
    return plan if useful else None


def prune_nulls(obj: Any, schema: Any, builtin: bool) -> None:
    """Drop nulls the API server drops (non-nullable, no default) and default the ones with a default."""
    if isinstance(obj, dict):
        for key in list(obj):
            value = obj[key]
            sub = None
            if isinstance(schema, dict):
                props = schema.get("properties") or {}
                sub = props.get(key) if key in props else (schema.get("additionalProperties")
                                                            if isinstance(schema.get("additionalProperties"), dict)
                                                            else None)
            if value is None:
                if builtin:
                    del obj[key]
                elif isinstance(sub, dict) and not sub.get("nullable"):
                    if "default" in sub:
                        obj[key] = copy.deepcopy(sub["default"])
                    else:
                        del obj[key]
            elif isinstance(value, (dict, list)):
                prune_nulls(value, sub, builtin)
    elif isinstance(obj, list):
        items = schema.get("items") if isinstance(schema, dict) else None
        for value in obj:
            if isinstance(value, (dict, list)):
                prune_nulls(value, items, builtin)


def apply_defaults(obj: Any, plan: Plan | None) -> None:
    """Fill absent fields that have a schema default (what the API server does before validating)."""
    if plan is None:
        return
    if isinstance(obj, dict):
        for name, value in plan.defaults.items():
            if name not in obj:
                obj[name] = copy.deepcopy(value)
        for name, sub in plan.props.items():
            if name in obj:
                apply_defaults(obj[name], sub)
        if plan.addl is not None:
            for key, value in obj.items():
                if key not in plan.props:
                    apply_defaults(value, plan.addl)
    elif isinstance(obj, list) and plan.items is not None:
        for value in obj:
            apply_defaults(value, plan.items)


Issue = tuple[str, str, str]  # (rule id, JSON pointer, message)


def check(obj: Any, plan: Plan | None, path: list | None = None) -> list[Issue]:
    """List-map uniqueness, embedded resources and CEL rules below plan."""
    out: list[Issue] = []
    if plan is not None:
        _walk(obj, plan, path or [], out)
    return out


def _walk(obj: Any, plan: Plan, path: list, out: list[Issue]) -> None:
    if plan.rules:
        _rules(obj, plan.rules, path, out)
    if isinstance(obj, dict):
        if plan.embedded:
            _embedded(obj, path, out)
        for name, sub in plan.props.items():
            if name in obj and obj[name] is not None:
                _walk(obj[name], sub, path + [name], out)
        if plan.addl is not None:
            for key, value in obj.items():
                if key not in plan.props and value is not None:
                    _walk(value, plan.addl, path + [key], out)
    elif isinstance(obj, list):
        if plan.list_map_keys is not None:
            _list_map(obj, plan, path, out)
        if plan.items is not None:
            for i, value in enumerate(obj):
                if value is not None:
                    _walk(value, plan.items, path + [i], out)


def _dotted(path: list) -> str:
    return dotted(path) or "<root>"


def _rules(obj: Any, rules: list[Rule], path: list, out: list[Issue]) -> None:
    env = environment()
    activation = env.activation({"self": obj}) if len(rules) > 1 else {"self": obj}
    for rule in rules:
        where = _dotted(path)
        target = path
        if rule.field_path:
            target = path + [p for p in rule.field_path.strip(".").split(".") if p]
            where = _dotted(target)
        if rule.program is None:
            out.append(("cel", pointer(target), (f"{where}: Invalid value: rule compile error: {rule.compile_error} "
                                                 f"(rule: {rule.rule})")))
            continue
        value, error = env.evaluate(rule.program, activation)
        if error:
            out.append(("cel", pointer(target), (f"{where}: Invalid value: evaluating the rule failed: {error} "
                                                 f"(rule: {rule.rule})")))
            continue
        if value is True:
            continue
        if value is not False:
            out.append(("cel", pointer(target), (f"{where}: Invalid value: the rule must evaluate to a boolean, "
                                                 f"got {value!r} (rule: {rule.rule})")))
            continue
        message = rule.message or f"failed rule: {rule.rule}"
        if rule.message_expression:
            program, _ = env.compile(rule.message_expression)
            if program is not None:
                text, err = env.evaluate(program, {"self": obj})
                if not err and isinstance(text, str) and text.strip():
                    message = text
        kind = {"FieldValueRequired": "Required value", "FieldValueForbidden": "Forbidden",
                "FieldValueDuplicate": "Duplicate value"}.get(rule.reason, "Invalid value")
        shown = _short(obj)
        out.append(("cel", pointer(target), (f"{where}: {kind}: {shown + ': ' if shown else ''}{message} "
                                             f"(rule: {rule.rule})")))


def _short(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return '"object"' if isinstance(value, dict) else '"array"'
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _list_map(items: list, plan: Plan, path: list, out: list[Issue]) -> None:
    seen: dict[Any, int] = {}
    keys = plan.list_map_keys or []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        key = tuple(item.get(k, plan.item_defaults.get(k)) for k in keys)
        try:
            text: Any = hash(key) and key
        except TypeError:
            text = json.dumps(key, sort_keys=True, default=str)
        if text in seen:
            shown = ", ".join(f"{k}={v!r}" for k, v in zip(keys, key))
            out.append(("list-map", pointer(path + [i]),
                        (f"{_dotted(path + [i])}: Duplicate value: an entry with {shown} is already at index "
                        f"{seen[text]} (x-kubernetes-list-map-keys: {', '.join(keys)} must be unique)")))
        else:
            seen[text] = i


def _embedded(obj: dict, path: list, out: list[Issue]) -> None:
    where = _dotted(path)
    api_version = obj.get("apiVersion")
    kind = obj.get("kind")
    if isinstance(api_version, str) and api_version.count("/") > 1:
        out.append(("embedded-resource", pointer(path + ["apiVersion"]),
                    f"{where}.apiVersion: Invalid value: {api_version!r}: unexpected GroupVersion string"))
    if isinstance(kind, str) and kind:
        errs = formats.dns1035_label(kind.lower())
        if errs:
            out.append(("embedded-resource", pointer(path + ["kind"]),
                        (f"{where}.kind: Invalid value: {kind!r}: may have mixed case, but should otherwise match: "
                        f"{errs[-1]}")))
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        for sub, message, severity in formats.check_metadata(meta, "", builtin=False,
                                                             namespaced=bool(meta.get("namespace")), root=False,
                                                             name_check=formats.path_segment):
            if severity == "error":
                out.append(("embedded-resource", pointer(path + ["metadata"]) + sub, f"{where}.{message}"))
