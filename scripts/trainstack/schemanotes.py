"""Reading values.yaml's comments for the schema generator: each key's line, its `# --`
description and its `# @schema` annotations (see schemagen.py for what they mean).

Every annotation is checked here, where its line is known: a YAML or JSON mapping of JSON
Schema 2020-12 keywords that is itself a valid schema. A bad one is a UserError naming the
file, the line and the key.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field

import jsonschema
import yaml

from . import yamlio
from .errors import UserError

# What follows `key:` when its value is a block scalar (`|`, `|-`, `>+2`, ...), optionally commented.
BLOCK_SCALAR = re.compile(r"^\s*[|>][-+0-9]*\s*(#.*)?$")
KEY_LINE = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.-]+|\"[^\"]+\"):(?:\s|$)")
DIRECTIVE = re.compile(r"^@schema(?P<kind>\S*)(?:\s+(?P<rest>.*))?$")
# The JSON Schema 2020-12 keywords an annotation may use (core, applicator, validation, annotation).
KEYWORDS = frozenset((
    "$ref", "$comment", "type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum",
    "exclusiveMinimum", "maxLength", "minLength", "pattern", "format", "maxItems", "minItems", "uniqueItems",
    "maxContains", "minContains", "maxProperties", "minProperties", "required", "dependentRequired", "properties",
    "patternProperties", "additionalProperties", "propertyNames", "unevaluatedProperties", "items", "prefixItems",
    "contains", "unevaluatedItems", "allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas",
    "title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly",
))
SCHEMA_MAPS = ("properties", "patternProperties", "dependentSchemas", "$defs")
SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
SCHEMA_ONE = ("items", "additionalProperties", "unevaluatedProperties", "unevaluatedItems", "contains",
              "propertyNames", "not", "if", "then", "else")


@dataclass
class Note:
    """The annotations of one key."""

    line: int
    fragment: dict = field(default_factory=dict)
    open: bool = False
    closed: bool = False
    def_name: str = ""
    extends: str = ""


@dataclass
class Parsed:
    notes: dict[tuple[str, ...], Note]
    lines: dict[tuple[str, ...], int]
    descriptions: dict[tuple[str, ...], str]
    defs: dict[str, dict]
    defs_line: dict[str, int]


def location(source: str, line: int, path: tuple[str, ...] | None = None) -> str:
    return f"{source}:{line}: " + (f"{'.'.join(path)}: " if path else "")


def _load_fragment(text: str, source: str, line: int, path: tuple[str, ...] | None) -> dict:
    try:
        fragment = yamlio.load(text) if text.strip() else {}
    except yaml.YAMLError as err:
        problem = str(getattr(err, "problem", None) or err).splitlines()[0]
        raise UserError(f"{location(source, line, path)}@schema annotation is not YAML or JSON ({problem})",
                        "write a mapping such as {pattern: \"^/\"}") from None
    if not isinstance(fragment, dict):
        raise UserError(f"{location(source, line, path)}@schema annotation is not a mapping: {text.strip()!r}",
                        "write a mapping such as {minimum: 1}")
    _check_schema(fragment, source, line, path)
    return fragment


def _unknown_keywords(schema, where: str = "") -> list[str]:
    if not isinstance(schema, dict):
        return []
    found = [f"{where}{key}" for key in schema if key not in KEYWORDS]
    for key in SCHEMA_MAPS:
        if isinstance(schema.get(key), dict):
            for name, sub in schema[key].items():
                found += _unknown_keywords(sub, f"{where}{key}.{name}.")
    for key in SCHEMA_LISTS:
        if isinstance(schema.get(key), list):
            for index, sub in enumerate(schema[key]):
                found += _unknown_keywords(sub, f"{where}{key}[{index}].")
    for key in SCHEMA_ONE:
        found += _unknown_keywords(schema.get(key), f"{where}{key}.")
    return found


def _check_schema(fragment: dict, source: str, line: int, path: tuple[str, ...] | None) -> None:
    unknown = _unknown_keywords(fragment)
    if unknown:
        raise UserError(f"{location(source, line, path)}@schema annotation has an unknown keyword "
                        f"{unknown[0]!r}", "use JSON Schema 2020-12 keywords (pattern, enum, minimum, ...)")
    validator = jsonschema.Draft202012Validator(jsonschema.Draft202012Validator.META_SCHEMA,
                                                format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    error = jsonschema.exceptions.best_match(validator.iter_errors(fragment))
    if error is not None:
        at = "/".join(str(p) for p in error.absolute_path)
        raise UserError(f"{location(source, line, path)}@schema annotation is not a valid JSON Schema"
                        f"{' at ' + at if at else ''}: {error.message}")


def parse(text: str, source: str = "values.yaml") -> Parsed:
    """Read keys, their `# --` descriptions and their `# @schema` annotations, line by line."""
    notes: dict[tuple[str, ...], Note] = {}
    lines: dict[tuple[str, ...], int] = {}
    descriptions: dict[tuple[str, ...], str] = {}
    defs: dict[str, dict] = {}
    defs_line: dict[str, int] = {}
    stack: list[tuple[int, str]] = []
    block: list[tuple[int, str]] = []  # comment lines directly above the current line
    orphans: list[int] = []  # annotation lines with a blank or a non-key line below them
    pending: list[str] | None = None  # a `# --` description (helm-docs: it survives blank lines)
    all_lines = text.splitlines()

    def annotations(block_lines: list[tuple[int, str]]) -> tuple[list[tuple[int, str, str]], set[int]]:
        """(line, kind, text) of each directive in a comment block; and the lines they use."""
        found, used, index = [], set(), 0
        while index < len(block_lines):
            number, body = block_lines[index]
            match = DIRECTIVE.match(body.strip())
            if not match:
                index += 1
                continue
            used.add(number)
            rest, more = match.group("rest") or "", []
            index += 1
            while index < len(block_lines) and re.match(r"^ {2,}\S", block_lines[index][1]):
                more.append(block_lines[index][1])
                used.add(block_lines[index][0])
                index += 1
            body_text = rest + ("\n" + textwrap.dedent("\n".join(more)) if more else "")
            found.append((number, match.group("kind") or "", body_text))
        return found, used

    def flush_defs(block_lines: list[tuple[int, str]]) -> list[tuple[int, str, str]]:
        found, _ = annotations(block_lines)
        rest = []
        for number, kind, body in found:
            if kind != ".defs":
                rest.append((number, kind, body))
                continue
            loaded = _load_defs(body, source, number)
            for name, schema in loaded.items():
                if name in defs:
                    raise UserError(f"{source}:{number}: @schema.defs: {name!r} is defined twice "
                                    f"(also on line {defs_line[name]})")
                defs[name], defs_line[name] = schema, number
        return rest

    in_annotation = False  # inside a directive and its indented continuation lines
    scalar_indent: int | None = None  # inside a block scalar (`key: |`): the key's indent
    for number, line in enumerate(all_lines, 1):
        stripped = line.strip()
        if scalar_indent is not None:
            if not stripped or len(line) - len(line.lstrip(" ")) > scalar_indent:
                continue  # the string's text, not keys or comments of the values
            scalar_indent = None
        if stripped.startswith("#"):
            body = stripped[1:]
            block.append((number, body))
            if DIRECTIVE.match(body.strip()):
                in_annotation = True
            elif in_annotation and re.match(r"^ {2,}\S", body):
                pass
            elif stripped.startswith("# --"):
                in_annotation, pending = False, [stripped[4:].strip()]
            else:
                in_annotation = False
                if pending is not None:
                    pending.append(body.strip())
            continue
        in_annotation = False
        match = KEY_LINE.match(line)
        own = flush_defs(block)
        if not match or stripped.startswith("- "):
            orphans += [n for n, _, _ in own]
            block = []
            if stripped:
                pending = None
            continue
        indent = len(match.group("indent"))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match.group("key").strip('"')))
        path = tuple(k for _, k in stack)
        lines[path] = number
        if BLOCK_SCALAR.match(line[match.end():]):
            scalar_indent = indent
        if pending is not None:
            descriptions[path] = " ".join(p for p in pending if p)
        pending = None
        if own:
            notes[path] = _note(path, own, source)
        block = []
    orphans += [n for n, _, _ in flush_defs(block)]
    if orphans:
        raise UserError(f"{source}:{orphans[0]}: @schema annotation is not directly above a key",
                        "put it on the comment lines right above the key it describes, no blank line between")
    return Parsed(notes, lines, descriptions, defs, defs_line)


def _load_defs(body: str, source: str, line: int) -> dict[str, dict]:
    try:
        loaded = yamlio.load(body) if body.strip() else None
    except yaml.YAMLError as err:
        problem = str(getattr(err, "problem", None) or err).splitlines()[0]
        raise UserError(f"{source}:{line}: @schema.defs is not YAML ({problem})") from None
    if not isinstance(loaded, dict) or not loaded:
        raise UserError(f"{source}:{line}: @schema.defs holds no definitions",
                        "indent `NAME: {schema}` lines below it by 2+ spaces")
    for name, schema in loaded.items():
        if not isinstance(schema, dict):
            raise UserError(f"{source}:{line}: @schema.defs: {name!r} is not a mapping")
        _check_schema(schema, source, line, (f"$defs.{name}",))
    return loaded


def _note(path: tuple[str, ...], found: list[tuple[int, str, str]], source: str) -> Note:
    note = Note(line=found[0][0])
    for number, kind, body in found:
        if kind == "":
            fragment = _load_fragment(body, source, number, path)
            _add_fragment(note, fragment, source, number, path)
        elif kind in (".open", ".closed"):
            fragment = _load_fragment(body, source, number, path)
            _add_fragment(note, fragment, source, number, path)
            setattr(note, kind[1:], True)
        elif kind == ".def":
            words = body.split()
            if not (len(words) == 1 or (len(words) == 3 and words[1] == "extends")) \
                    or not all(re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", w) for w in words[::2]):
                raise UserError(f"{location(source, number, path)}@schema.def wants NAME or NAME extends BASE, "
                                f"not {body.strip()!r}")
            note.def_name, note.extends = words[0], (words[2] if len(words) == 3 else "")
        else:
            raise UserError(f"{location(source, number, path)}unknown annotation @schema{kind}",
                            "use @schema, @schema.open, @schema.closed, @schema.def or @schema.defs")
    if note.open and note.closed:
        raise UserError(f"{location(source, note.line, path)}@schema.open and @schema.closed on one key")
    return note


def _add_fragment(note: Note, fragment: dict, source: str, line: int, path: tuple[str, ...]) -> None:
    twice = set(fragment) & set(note.fragment)
    if twice:
        raise UserError(f"{location(source, line, path)}@schema sets {min(twice)!r} twice")
    note.fragment.update(fragment)
