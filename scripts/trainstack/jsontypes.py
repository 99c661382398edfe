"""The JSON Schema type name of a parsed YAML/JSON value: for the schema generator's inferred
types and the validator's messages alike."""

from __future__ import annotations

from typing import Any

_TYPES: tuple[tuple[type, str], ...] = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"),
                                        (list, "array"), (dict, "object"))


def json_type(value: Any) -> str:
    """'null', 'boolean', 'integer', 'number', 'string', 'array' or 'object' (bool before int: True is an int)."""
    if value is None:
        return "null"
    return next((name for kind, name in _TYPES if isinstance(value, kind)), "object")


def dig(obj: Any, key: Any, *keys: Any, default: Any = None) -> Any:
    """OBJ[key][k2]...[kn] of parsed YAML/JSON, for `((obj.get(key) or {}).get(k2) or {}).get(kn, default)`:
    a step on the way that is missing, null, empty or not a mapping gives DEFAULT; the last key, when
    present, gives its value (null included), as dict.get does."""
    path = (key, *keys)
    for step in path[:-1]:
        obj = obj.get(step) if isinstance(obj, dict) else None
    return obj.get(path[-1], default) if isinstance(obj, dict) else default
