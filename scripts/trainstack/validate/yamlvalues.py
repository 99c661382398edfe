"""From libyaml's node tree to plain values, the way kubectl reads YAML.

`Composer` is libyaml's composer without PyYAML's resolver calls; `Builder` turns its node tree
into plain Python values, resolving plain scalars as go-yaml v2 does (`resolve_plain`: `y`/`n`/
`on`/`off` are booleans, `12:30` stays a string, timestamps stay strings), and notes duplicate
keys, nulls, values JSON cannot carry and alias bombs. `documents.py` splits files and builds
its Documents with these.
"""

from __future__ import annotations

import math
import re
from typing import Any

from yaml._yaml import CParser
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

_EXPANDED_LIMIT = 1_000_000  # values a document may expand to through aliases (go-yaml refuses such bombs too)


# ----------------------------------------------------------------------------- scalars
_YAML_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")
_OCTAL = re.compile(r"^[-+]?0[0-7]+$")
_TIMESTAMP = re.compile(r"^\d{4}-\d{1,2}-\d{1,2}(([Tt]|[ \t]+)\d{1,2}:\d{2}:\d{2}(\.\d*)?"
                        r"([ \t]*(Z|[-+]\d{1,2}(:?\d{2})?))?)?$")
_BOOL = {v: True for v in ("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON")}
_BOOL.update({v: False for v in ("n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF")})
_SPECIAL: dict[str, Any] = {"": None, "~": None, "null": None, "Null": None, "NULL": None,
                            ".nan": math.nan, ".NaN": math.nan, ".NAN": math.nan,
                            ".inf": math.inf, ".Inf": math.inf, ".INF": math.inf,
                            "+.inf": math.inf, "+.Inf": math.inf, "+.INF": math.inf,
                            "-.inf": -math.inf, "-.Inf": -math.inf, "-.INF": -math.inf}
_SPECIAL.update(_BOOL)
_INT64 = (-(2**63), 2**64 - 1)
_INFINITIES = (math.inf, -math.inf)
_cache: dict[str, Any] = {}
# Plain scalars resolved so far. Bounded and emptied when full, so memory stays flat in the number
# of documents (a corpus of unique names would otherwise fill it); the hot values (keys, common
# values) are back after a few documents.
_CACHE_MAX = 16_384


def resolve_plain(value: str) -> Any:
    """A plain (unquoted) scalar as go-yaml v2 resolves it (what `kubectl` sends)."""
    try:
        return _cache[value]
    except KeyError:
        pass
    out = _resolve_plain(value)
    if len(_cache) >= _CACHE_MAX:
        _cache.clear()
    _cache[value] = out
    return out


def _resolve_plain(value: str) -> Any:
    if value in _SPECIAL:
        return _SPECIAL[value]
    first = value[0]
    if first == "<" and value == "<<":
        return value
    if first == "." :
        return float(value) if _YAML_FLOAT.match(value) else value
    if not (first.isdigit() or first in "+-"):
        return value
    if _TIMESTAMP.match(value):
        return value  # go-yaml makes a time; kubectl then writes it back as a string
    plain = value.replace("_", "")
    try:
        if _OCTAL.match(plain):
            number = int(plain, 8)
        elif re.match(r"^[-+]?0[xXoObB]", plain) or re.match(r"^[-+]?\d+$", plain):
            number = int(plain, 0) if not re.match(r"^[-+]?0\d", plain) else int(plain, 10)
        else:
            raise ValueError
        if _INT64[0] <= number <= _INT64[1]:
            return number
    except ValueError:
        pass
    if _YAML_FLOAT.match(plain):
        try:
            return float(plain)
        except ValueError:
            pass
    return value


class Composer(CParser):
    """libyaml composer without PyYAML's Python-level resolver calls.

    The resolver hooks are C-level builtins: every untagged node gets a `slice` as its tag, and
    the builder resolves plain scalars itself (cached per value), which is most of the speed-up
    over `yaml.CSafeLoader`. Explicit tags stay strings; quoted scalars have a style.
    """

    resolve = slice  # (kind, value, implicit) -> a marker object, no Python frame
    descend_resolver = slice
    ascend_resolver = tuple


class Builder:
    """Node tree -> plain values; notes duplicate keys, nulls and values JSON cannot carry."""

    __slots__ = ("bad", "count", "dup_nodes", "has_null", "memo", "sizes")

    def __init__(self) -> None:
        self.dup_nodes: list[MappingNode] = []
        self.has_null = False
        self.bad: list[tuple[Node, str]] = []
        self.memo: dict[int, Any] = {}
        self.sizes: dict[int, int] = {}
        self.count = 0

    def build(self, node: Node) -> Any:
        cls = node.__class__
        if cls is ScalarNode:
            return self._scalar(node)
        key = id(node)
        if key in self.memo:
            size = self.sizes.get(key)
            if size is None:
                raise TooManyAliases("an anchor's value contains an alias of itself")
            self.count += size
            if self.count > _EXPANDED_LIMIT:
                raise TooManyAliases(f"the document expands to more than {_EXPANDED_LIMIT} values through aliases")
            return self.memo[key]
        start = self.count
        self.count += len(node.value) + 1
        if cls is MappingNode:
            out: dict[str, Any] = {}
            self.memo[key] = out
            merge = None
            build = self.build
            scalar = self._scalar
            cache = _cache
            for k, v in node.value:
                if k.__class__ is ScalarNode:
                    if k.tag.__class__ is slice:
                        if k.style == "":
                            text = k.value
                            if text == "<<":
                                merge = (merge or []) + [v]
                                continue
                            name = cache[text] if text in cache else resolve_plain(text)
                            if name.__class__ is not str:
                                name = key_string(name)
                        else:
                            name = k.value
                    else:
                        name = key_string(self._tagged(k))
                else:
                    self.bad.append((k, "a mapping key must be a string, not a collection"))
                    continue
                if v.__class__ is ScalarNode:
                    if v.tag.__class__ is slice:
                        if v.style == "":
                            text = v.value
                            value = cache[text] if text in cache else resolve_plain(text)
                            if value is None:
                                self.has_null = True
                            elif value.__class__ is float and not math.isfinite(value):
                                self.bad.append((v, f"{text} cannot be represented in JSON"))
                            out[name] = value
                        else:
                            out[name] = v.value
                    else:
                        out[name] = scalar(v)
                else:
                    out[name] = build(v)
            if len(out) != len(node.value) and (merge is None or len(out) + len(merge) != len(node.value)):
                self.dup_nodes.append(node)
            if merge:
                self._merge(out, merge)
            self.sizes[key] = self.count - start
            return out
        out_list: list[Any] = []
        self.memo[key] = out_list
        build = self.build
        out_list.extend([build(item) for item in node.value])
        self.sizes[key] = self.count - start
        return out_list

    def _scalar(self, node: ScalarNode) -> Any:
        if node.tag.__class__ is slice:
            if node.style != "":
                return node.value
            value = resolve_plain(node.value)
            if value is None:
                self.has_null = True
            elif value.__class__ is float and not math.isfinite(value):
                self.bad.append((node, f"{node.value} cannot be represented in JSON"))
            return value
        return self._tagged(node)

    def _merge(self, out: dict, merges: list[Node]) -> None:
        sources: list[Node] = []
        for value in merges:
            sources.extend(value.value if isinstance(value, SequenceNode) else [value])
        for src in reversed(sources):
            if not isinstance(src, MappingNode):
                self.bad.append((src, "a merge key (<<) needs a mapping or a list of mappings"))
                continue
            for k, v in self.build(src).items():
                out.setdefault(k, v)

    def _tagged(self, node: ScalarNode) -> Any:
        tag = node.tag
        if tag == "tag:yaml.org,2002:int":
            value = resolve_plain(node.value)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
            self.bad.append((node, f"'{node.value}' is not an integer (!!int)"))
            return node.value
        if tag == "tag:yaml.org,2002:float":
            value = resolve_plain(node.value)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
            self.bad.append((node, f"'{node.value}' is not a number (!!float)"))
            return node.value
        if tag == "tag:yaml.org,2002:bool":
            value = _BOOL.get(node.value)
            if value is None:
                self.bad.append((node, f"'{node.value}' is not a boolean (!!bool)"))
                return node.value
            return value
        if tag == "tag:yaml.org,2002:null":
            self.has_null = True
            return None
        # !!str, !!binary, !!timestamp and local tags: the text, as kubectl keeps it
        return node.value


def key_name(k: ScalarNode, builder: Builder) -> str:
    """The JSON key a scalar key node becomes (what the builder used)."""
    if k.tag.__class__ is slice:
        if k.style != "":
            return k.value
        name = resolve_plain(k.value)
        return name if name.__class__ is str else key_string(name)
    return key_string(builder._tagged(k))


def key_string(value: Any) -> str:
    """go-yaml v2 + sigs.k8s.io/yaml turn non-string keys into their JSON text."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


class TooManyAliases(Exception):
    pass
