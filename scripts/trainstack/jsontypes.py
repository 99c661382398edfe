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
