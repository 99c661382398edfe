"""Reading YAML and JSON manifests document by document, keeping line numbers.

Files are split at `---` lines first (a document marker at column 0 always ends a document,
even inside block scalars), so one broken document never hides the others. Each document is
composed with libyaml (PyYAML's CParser) and built into plain Python values by a small
constructor (`yamlvalues.py`) that resolves plain scalars the way kubectl's YAML decoder does (go-yaml v2:
`y`/`n`/`on`/`off` are booleans, `12:30` stays a string, timestamps stay strings), reports
duplicate keys, and keeps the node tree so a JSON pointer can be mapped back to a line.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from .. import yamlio
from ..errors import UsageError
from .yamlvalues import Builder, Composer, TooManyAliases, key_name

SUFFIXES = (".yaml", ".yml", ".json")
STDIN = "-"

_MARKER = re.compile(r"^(---|\.\.\.)(?=[ \t\r]|$)", re.MULTILINE)
# A lone UTF-16 surrogate: in a str it cannot be encoded as UTF-8 (libyaml, jsonschema-rs and the CEL
# evaluator all need UTF-8). A byte that is not UTF-8, or a surrogate in a key, is reported and the document
# not validated further; a JSON string value escaping one (\\ud800) is what the API server's JSON decoder
# reads as U+FFFD and accepts: a warning, and the value is validated with U+FFFD (so a field whose format
# rejects that still fails).
_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE_ESCAPE_FULL = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_ESCAPE_OR_SURROGATE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|.)|[\ud800-\udfff]", re.DOTALL)


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
    composer = Composer(text)
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
    first = len(docs)

    def next_index() -> int:
        return (index + len(docs) - first) if index >= 0 else len(docs)

    bad = _SURROGATE.search(chunk)
    if bad is not None:
        line = offset + chunk.count("\n", 0, bad.start()) + 1
        where = _yaml_field_at(chunk, bad.start())
        docs.append(Document(file, next_index(), line, None, problems=[
            _invalid_text(bad.group(), where, line, raw=True)]))
        return
    composer = Composer(chunk)
    try:
        while True:
            try:
                node = composer.get_node() if composer.check_node() else None
            except yaml.MarkedYAMLError as err:
                mark = err.problem_mark or err.context_mark
                line = offset + (mark.line if mark else 0) + 1
                docs.append(Document(file, next_index(), line, None, problems=[
                    Problem("yaml-syntax", f"YAML syntax error: {yamlio.error_line(err, chunk, offset)}", "", line)]))
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
    builder = Builder()
    line = node.start_mark.line + offset + 1
    try:
        data = builder.build(node)
    except TooManyAliases as err:
        return Document(file, index, line, None, None, offset, problems=[
            Problem("yaml-syntax", f"YAML aliases: {err}", "", line)])
    doc = Document(file, index, line, data, node, offset, builder.has_null)
    if builder.dup_nodes or builder.bad:
        paths = _node_paths(node, {id(n) for n in builder.dup_nodes} | {id(n) for n, _ in builder.bad})
        for dup in builder.dup_nodes:
            seen: dict[str, int] = {}
            for k, _ in dup.value:
                if isinstance(k, ScalarNode) and not (k.value == "<<" and k.style == ""):
                    name = key_name(k, builder)
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
    replaced: list[tuple[list, str]] = []
    if _SURROGATE.search(text) or _SURROGATE_ESCAPE.search(text):
        found = _surrogate_field(data)
        if found is not None:
            where, char = found
            at, first = _lone_surrogate_at(text)
            line = text.count("\n", 0, at) + 1 if at >= 0 else 1
            raw = at >= 0 and not text.startswith("\\", at)
            replaced = [] if raw or _SURROGATE.search(text) else _replace_surrogates(data)
            if not replaced:
                return [Document(file, 0, line, None, problems=[_invalid_text(first or char, where, line, raw=raw)])]
            # only escapes, only in values: what the API server stores; lines from the text with U+FFFD escaped
            text = _SURROGATE_ESCAPE_FULL.sub(lambda m: "\\ufffd", text)
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
    for where, char in replaced:
        line = doc.line_of(pointer(where))
        doc.problems.append(Problem(
            "invalid-text", f"{dotted(where) or 'the document'}: unpaired UTF-16 surrogate U+{ord(char):04X} is not "
            f"Unicode text; the API server stores U+FFFD, the replacement character, instead (line {line})",
            pointer(where), line, severity="warning"))
    return [doc]


def _invalid_text(char: str, where: list, line: int, raw: bool) -> Problem:
    """The finding for a lone surrogate `char` in the field at `where` (key/index list) on `line`."""
    field_name = _printable(dotted(where)) or "the document"
    code = ord(char)
    if raw and 0xDC80 <= code <= 0xDCFF:  # how Python keeps an undecodable byte (surrogateescape)
        what = f"byte 0x{code - 0xDC00:02X} is not UTF-8 text"
    else:
        what = (f"unpaired UTF-16 surrogate U+{code:04X} is not Unicode text (the API server would store "
                "U+FFFD, the replacement character, instead)")
    return Problem("invalid-text", f"{field_name}: Invalid value: {what} (line {line})",
                   _printable(pointer(where)), line)


def _printable(text: str) -> str:
    """text with each lone surrogate written as a \\uXXXX escape (so every output can encode it)."""
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _surrogate_field(data: Any) -> tuple[list, str] | None:
    """(keys/indexes, surrogate) of the first string (key or value, in document order) with a lone surrogate."""
    stack: list[tuple[Any, list]] = [(data, [])]
    while stack:
        value, path = stack.pop()
        if isinstance(value, str):
            found = _SURROGATE.search(value)
            if found is not None:
                return path, found.group()
        elif isinstance(value, dict):
            children: list[tuple[Any, list]] = []
            for key, item in value.items():
                if isinstance(key, str) and _SURROGATE.search(key):
                    children.append((key, path + [key]))
                    break
                children.append((item, path + [key]))
            stack.extend(reversed(children))
        elif isinstance(value, list):
            stack.extend(reversed([(item, path + [i]) for i, item in enumerate(value)]))
    return None


def _replace_surrogates(data: Any) -> list[tuple[list, str]]:
    """Replace, in place, each lone surrogate of every string value with U+FFFD, as the API server's JSON
    decoder does; (keys/indexes, first surrogate) of each value changed. [] (and nothing changed) when a
    key holds one: a key is a field name, not free text."""
    changed: list[tuple[list, str]] = []
    stack: list[tuple[Any, list]] = [(data, [])]
    while stack:
        value, path = stack.pop()
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        for key, item in items:
            if isinstance(key, str) and _SURROGATE.search(key):
                return []
            if isinstance(item, str):
                found = _SURROGATE.search(item)
                if found is not None:
                    changed.append((path + [key], found.group()))
            elif isinstance(item, (dict, list)):
                stack.append((item, path + [key]))
    for where, _ in changed:
        parent = data
        for part in where[:-1]:
            parent = parent[part]
        parent[where[-1]] = _SURROGATE.sub("\ufffd", parent[where[-1]])
    changed.sort(key=lambda c: [str(p) for p in c[0]])
    return changed


def _lone_surrogate_at(text: str) -> tuple[int, str]:
    """(offset, surrogate) of the first lone surrogate in a JSON text, as a raw character or a \\u escape."""
    high, high_end = -1, -1
    for match in _ESCAPE_OR_SURROGATE.finditer(text):
        code = int(match.group(1), 16) if match.group(1) else -1
        if high >= 0:
            if 0xDC00 <= code <= 0xDFFF and match.start() == high_end:
                high = -1
                continue
            return high, chr(int(text[high + 2:high + 6], 16))
        if not match.group().startswith("\\"):
            return match.start(), match.group()
        if 0xD800 <= code <= 0xDBFF:
            high, high_end = match.start(), match.end()
        elif 0xDC00 <= code <= 0xDFFF:
            return match.start(), chr(code)
    if high >= 0:
        return high, chr(int(text[high + 2:high + 6], 16))
    return -1, ""


def _yaml_field_at(chunk: str, offset: int) -> list:
    """Keys/indexes of the YAML scalar that covers character `offset` ([] when unknown)."""
    node = _compose_quietly(_SURROGATE.sub("\ufffd", chunk))
    stack: list[tuple[Node, list]] = [(node, [])] if node is not None else []
    while stack:
        current, path = stack.pop()
        if isinstance(current, ScalarNode):
            if current.start_mark.index <= offset < max(current.end_mark.index, current.start_mark.index + 1):
                return path
        elif isinstance(current, MappingNode):
            for key, value in current.value:
                name = key.value if isinstance(key, ScalarNode) else "?"
                if isinstance(key, ScalarNode) and key.start_mark.index <= offset < key.end_mark.index:
                    return path + [name]
                stack.append((value, path + [name]))
        elif isinstance(current, SequenceNode):
            stack.extend((item, path + [i]) for i, item in enumerate(current.value))
    return []


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} cannot be represented in JSON")


# ----------------------------------------------------------------------------- files
def expand(paths: list[str]) -> list[str]:
    """Files named or found (recursively, sorted) under folders; '-' is stdin. Missing paths raise."""
    out: list[str] = []
    for raw in paths:
        if raw == STDIN:
            out.append(STDIN)
            continue
        path = Path(raw)
        if path.is_dir():
            found = [str(p) for p in sorted(path.rglob("*"))
                     if p.is_file() and p.suffix.lower() in SUFFIXES and not _hidden(p, path)]
            if not found:
                raise UsageError(f"{raw}: no YAML or JSON files in the folder (*.yaml, *.yml, *.json)",
                                 "name the files, or a folder that holds them")
            out.extend(found)
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
