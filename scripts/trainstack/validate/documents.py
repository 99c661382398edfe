"""Reading YAML and JSON manifests document by document, keeping line numbers.

Files are split at `---` lines first (a document marker at column 0 always ends a document,
even inside block scalars), so one broken document never hides the others. Each document is
composed with libyaml (PyYAML's CParser) and built into plain Python values by a small
constructor that resolves plain scalars the way kubectl's YAML decoder does (go-yaml v2:
`y`/`n`/`on`/`off` are booleans, `12:30` stays a string, timestamps stay strings), reports
duplicate keys, and keeps the node tree so a JSON pointer can be mapped back to a line.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml._yaml import CParser
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

SUFFIXES = (".yaml", ".yml", ".json")
STDIN = "-"

_EXPANDED_LIMIT = 1_000_000  # values a document may expand to through aliases (go-yaml refuses such bombs too)

_MARKER = re.compile(r"^(---|\.\.\.)(?=[ \t\r]|$)", re.MULTILINE)


@dataclass
class Problem:
    """A parse-level finding: rule, message, JSON pointer (or ''), absolute 1-based line."""

    rule: str
    message: str
    path: str
    line: int
    severity: str = "error"


@dataclass
class Document:
    """One document of one file: its data, where it starts, and what parsing found."""

    file: str
    index: int
    line: int
    data: Any
    node: Node | None = None
    line_offset: int = 0
    has_null: bool = False
    problems: list[Problem] = field(default_factory=list)
    prefix: str = ""  # JSON pointer of this object inside the parsed value (items of a v1 List)
    text: str | None = None  # kept for JSON documents: composed as YAML only when a line is asked for

    def line_of(self, pointer: str) -> int:
        """The line of the field at JSON pointer `pointer` (the closest known ancestor)."""
        pointer = self.prefix + pointer
        if self.node is None and self.text is not None:
            self.node, self.text = _compose_quietly(self.text), None
        if self.node is None or not pointer:
            return self.line
        node: Node = self.node
        line = node.start_mark.line
        for part in _pointer_parts(pointer):
            if isinstance(node, MappingNode):
                for key, value in node.value:
                    if isinstance(key, ScalarNode) and key.value == part:
                        line = key.start_mark.line
                        node = value
                        break
                else:
                    break
            elif isinstance(node, SequenceNode) and part.isdigit() and int(part) < len(node.value):
                node = node.value[int(part)]
                line = node.start_mark.line
            else:
                break
        return line + self.line_offset + 1


def _compose_quietly(text: str) -> Node | None:
    composer = _Composer(text)
    try:
        return composer.get_node() if composer.check_node() else None
    except Exception:  # noqa: BLE001 - lines are a nicety; a JSON text libyaml cannot read keeps line 1
        return None
    finally:
        composer.dispose()


def _pointer_parts(pointer: str) -> list[str]:
    return [p.replace("~1", "/").replace("~0", "~") for p in pointer.split("/")[1:]]


def pointer(parts: list | tuple) -> str:
    """JSON pointer (RFC 6901) for a list of keys and indexes."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def dotted(path: list | tuple) -> str:
    """The field path as the API server writes it in messages: `spec.containers[0].name`."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (("." if out else "") + str(part))
    return out


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


# ----------------------------------------------------------------------------- parsing
class _Composer(CParser):
    """libyaml composer without PyYAML's Python-level resolver calls.

    The resolver hooks are C-level builtins: every untagged node gets a `slice` as its tag, and
    the builder resolves plain scalars itself (cached per value), which is most of the speed-up
    over `yaml.CSafeLoader`. Explicit tags stay strings; quoted scalars have a style.
    """

    resolve = slice  # (kind, value, implicit) -> a marker object, no Python frame
    descend_resolver = slice
    ascend_resolver = tuple


class _Builder:
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
                raise _TooManyAliases("an anchor's value contains an alias of itself")
            self.count += size
            if self.count > _EXPANDED_LIMIT:
                raise _TooManyAliases(f"the document expands to more than {_EXPANDED_LIMIT} values through aliases")
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
                                name = _key_string(name)
                        else:
                            name = k.value
                    else:
                        name = _key_string(self._tagged(k))
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


def _key_name(k: ScalarNode, builder: _Builder) -> str:
    """The JSON key a scalar key node becomes (what the builder used)."""
    if k.tag.__class__ is slice:
        if k.style != "":
            return k.value
        name = resolve_plain(k.value)
        return name if name.__class__ is str else _key_string(name)
    return _key_string(builder._tagged(k))


def _key_string(value: Any) -> str:
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


class _TooManyAliases(Exception):
    pass


def split(text: str) -> list[tuple[int, str]]:
    """(line offset, text) chunks at document markers; a marker line starts its chunk."""
    chunks: list[tuple[int, str]] = []
    start = 0
    line = 0
    for match in _MARKER.finditer(text):
        if match.group(1) == "...":
            # a document end marker belongs to the document it ends: cut after its line
            end = text.find("\n", match.end())
            pos = len(text) if end < 0 else end + 1
        else:
            pos = match.start()
        if pos <= start or pos >= len(text):
            continue
        chunks.append((line, text[start:pos]))
        line += text.count("\n", start, pos)
        start = pos
    chunks.append((line, text[start:]))
    return chunks


def parse_text(text: str, file: str, base_index: int = 0, base_line: int = 0) -> list[Document]:
    """Every non-empty document of a YAML (or JSON) text, in order.

    A document's index is its position among the file's `---` sections (a comment-only head
    before the first marker does not count), so parts of one file parsed apart agree.
    """
    if base_index == 0 and base_line == 0 and (
            file.endswith(".json") or (file == STDIN and text.lstrip()[:1] in ("{", "["))):
        parsed = _parse_json(text, file)
        if parsed is not None:
            return parsed
    docs: list[Document] = []
    if "\r" in text:
        text = text.replace("\r\n", "\n")
    chunks = split(text)
    skip = 1 if base_index == 0 and base_line == 0 and len(chunks) > 1 and _blank(chunks[0][1]) else 0
    for number, (offset, chunk) in enumerate(chunks):
        if not chunk.strip():
            continue
        _parse_chunk(chunk, base_line + offset, file, docs, base_index + number - skip)
    return docs


def _blank(chunk: str) -> bool:
    """Only whitespace and comments (the head before a file's first `---` does not count as a document)."""
    return all(not line.strip() or line.lstrip().startswith("#") for line in chunk.splitlines())


def parts(text: str, size: int) -> list[tuple[int, int, str]]:
    """(first document index, first line offset, text) pieces of about `size` characters, cut at markers."""
    chunks = split(text)
    skip = 1 if len(chunks) > 1 and _blank(chunks[0][1]) else 0
    out: list[tuple[int, int, str]] = []
    start = 0
    while start < len(chunks):
        end, length = start, 0
        while end < len(chunks) and (length < size or end == start):
            length += len(chunks[end][1])
            end += 1
        piece = "".join(chunk for _, chunk in chunks[start:end])
        if start == 0:
            out.append((0, 0, piece))
        else:
            out.append((start - skip, chunks[start][0], piece))
        start = end
    return out


def _parse_chunk(chunk: str, offset: int, file: str, docs: list[Document], index: int = -1) -> None:
    composer = _Composer(chunk)
    first = len(docs)

    def next_index() -> int:
        return (index + len(docs) - first) if index >= 0 else len(docs)

    try:
        while True:
            try:
                node = composer.get_node() if composer.check_node() else None
            except yaml.MarkedYAMLError as err:
                mark = err.problem_mark or err.context_mark
                line = offset + (mark.line if mark else 0) + 1
                message = " ".join(str(x) for x in (err.context, err.problem) if x) or "invalid YAML"
                docs.append(Document(file, next_index(), line, None, problems=[
                    Problem("yaml-syntax", f"YAML syntax error: {message} (line {line})", "", line)]))
                return
            except yaml.YAMLError as err:
                line = offset + 1
                docs.append(Document(file, next_index(), line, None,
                                     problems=[Problem("yaml-syntax", f"YAML error: {err}", "", line)]))
                return
            if node is None:
                return
            if isinstance(node, ScalarNode) and node.tag.__class__ is slice and node.style == "" and not node.value:
                continue  # an empty document (only comments)
            docs.append(_build(node, offset, file, next_index()))
    except (RecursionError, MemoryError):
        docs.append(Document(file, next_index(), offset + 1, None, problems=[
            Problem("yaml-syntax", "the document nests too deeply to be read", "", offset + 1)]))
    finally:
        composer.dispose()


def _build(node: Node, offset: int, file: str, index: int) -> Document:
    builder = _Builder()
    line = node.start_mark.line + offset + 1
    try:
        data = builder.build(node)
    except _TooManyAliases as err:
        return Document(file, index, line, None, None, offset, problems=[
            Problem("yaml-syntax", f"YAML aliases: {err}", "", line)])
    doc = Document(file, index, line, data, node, offset, builder.has_null)
    if builder.dup_nodes or builder.bad:
        paths = _node_paths(node, {id(n) for n in builder.dup_nodes} | {id(n) for n, _ in builder.bad})
        for dup in builder.dup_nodes:
            seen: dict[str, int] = {}
            for k, _ in dup.value:
                if isinstance(k, ScalarNode) and not (k.value == "<<" and k.style == ""):
                    name = _key_name(k, builder)
                    if name in seen:
                        where = paths.get(id(dup), [])
                        at = k.start_mark.line + offset + 1
                        shown = name if name == k.value else f"{k.value}' (read as '{name}')"
                        doc.problems.append(Problem(
                            "duplicate-key",
                            f"duplicate key '{shown}' at {dotted(where) or 'the top level'} (first at line "
                            f"{seen[name]}); the API server rejects duplicate fields", pointer(where + [name]), at))
                    else:
                        seen[name] = k.start_mark.line + offset + 1
        for bad, message in builder.bad:
            at = bad.start_mark.line + offset + 1
            doc.problems.append(Problem("json-value", message, pointer(paths.get(id(bad), [])), at))
    return doc


def _node_paths(root: Node, wanted: set[int]) -> dict[int, list]:
    """Paths (key/index lists) of the nodes whose ids are in wanted."""
    found: dict[int, list] = {}
    stack: list[tuple[Node, list]] = [(root, [])]
    seen: set[int] = set()
    while stack and len(found) < len(wanted):
        node, path = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if id(node) in wanted:
            found[id(node)] = path
        if isinstance(node, MappingNode):
            for k, v in node.value:
                if id(k) in wanted:
                    found[id(k)] = path
                name = k.value if isinstance(k, ScalarNode) else "?"
                stack.append((v, path + [name]))
        elif isinstance(node, SequenceNode):
            for i, item in enumerate(node.value):
                stack.append((item, path + [i]))
    return found


def _parse_json(text: str, file: str) -> list[Document] | None:
    """A JSON file: one value (a List is expanded later); None lets YAML try (JSON streams)."""
    dups: list[str] = []
    has_null = "null" in text

    def pairs(items: list[tuple[str, Any]]) -> dict:
        out = dict(items)
        if len(out) != len(items):
            seen = set()
            for k, _ in items:
                if k in seen:
                    dups.append(k)
                seen.add(k)
        return out

    try:
        data = json.loads(text, object_pairs_hook=pairs, parse_constant=_reject_constant)
    except json.JSONDecodeError:
        return None
    except RecursionError:
        return [Document(file, 0, 1, None, problems=[
            Problem("yaml-syntax", "the document nests too deeply to be read", "", 1)])]
    except ValueError as err:
        return [Document(file, 0, 1, None, problems=[Problem("json-value", str(err), "", 1)])]
    doc = Document(file, 0, 1, data, has_null=has_null, text=text)
    if dups:
        # Line numbers for JSON come from composing it as YAML (JSON is YAML flow style).
        yaml_docs: list[Document] = []
        try:
            _parse_chunk(text, 0, file, yaml_docs)
        except Exception:  # noqa: BLE001 - lines are a nicety; the finding is not
            yaml_docs = []
        if yaml_docs:
            doc.problems = [p for p in yaml_docs[0].problems if p.rule == "duplicate-key"]
        if not doc.problems:
            doc.problems = [Problem("duplicate-key", f"duplicate key '{k}'; the API server rejects duplicate fields",
                                    "", 1) for k in dups]
    return [doc]


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} cannot be represented in JSON")


# ----------------------------------------------------------------------------- files
def expand(paths: list[str]) -> list[str]:
    """Files named or found (recursively, sorted) under folders; '-' is stdin. Missing paths raise."""
    from ..errors import UsageError

    out: list[str] = []
    for raw in paths:
        if raw == STDIN:
            out.append(STDIN)
            continue
        path = Path(raw)
        if path.is_dir():
            out.extend(str(p) for p in sorted(path.rglob("*"))
                       if p.is_file() and p.suffix.lower() in SUFFIXES and not _hidden(p, path))
        elif path.is_file():
            out.append(str(path))
        else:
            raise UsageError(f"{raw}: no such file or folder", "pass YAML/JSON files, folders, or - for stdin")
    return out


def _hidden(path: Path, root: Path) -> bool:
    return any(part.startswith(".") for part in path.relative_to(root).parts)


def read(file: str, stdin_text: str | None = None) -> tuple[str | None, Problem | None]:
    """The text of file (or stdin), or a Problem saying why it cannot be read."""
    try:
        if file == STDIN:
            return (stdin_text if stdin_text is not None else sys.stdin.read()), None
        raw = Path(file).read_bytes()
    except OSError as err:
        return None, Problem("yaml-syntax", f"cannot read the file: {err.strerror or err}", "", 0)
    try:
        return raw.decode("utf-8-sig"), None
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        return None, Problem("yaml-syntax", f"the file is not UTF-8 text (byte {err.start}, line {line})", "", line)


def documents(file: str, text: str, base_index: int = 0, base_line: int = 0) -> Iterator[Document]:
    """Parsed documents of one file's text; a v1 List is expanded into its items."""
    for doc in parse_text(text, file, base_index, base_line):
        data = doc.data
        if (isinstance(data, dict) and data.get("kind") == "List" and data.get("apiVersion") == "v1"
                and isinstance(data.get("items"), list) and not doc.problems):
            for i, item in enumerate(data["items"]):
                yield Document(file, doc.index, doc.line, item, doc.node, doc.line_offset, doc.has_null,
                               prefix=f"/items/{i}", text=doc.text)
            continue
        yield doc
