"""Generates the chart's values.schema.json from values.yaml: its defaults and `# @schema` comments.

Each key's schema starts from its default: its type (string, integer, number, boolean, array,
object) and, for an object trainstack owns, every key below it with `additionalProperties: false`.
Comment lines directly above a key (no blank line between) refine it:

    # @schema {pattern: "^/"}      JSON Schema keywords (a YAML or JSON mapping) over the generated
                                   ones; `properties` entries are added, `$ref` replaces the lot;
                                   it may go on over following lines indented by 2+ spaces
    # @schema.open                 an object whose keys are not trainstack's (an upstream chart's
                                   values, a Kubernetes struct, a map): not closed, and keys below
                                   are described only where annotated
    # @schema.closed               inside an open object: trainstack's own object again
    # @schema.def NAME [extends BASE]
                                   this key's schema is `#/$defs/NAME`; every key marked NAME adds
                                   the keys the earlier ones lack; `extends` starts from BASE's keys
    # @schema.defs                 (anywhere) the indented lines below are named definitions

A default that breaks its own schema, an annotation that is not a JSON Schema, an unknown keyword
or a `$ref` to nothing is a UserError naming values.yaml, the line and the key.
"""

from __future__ import annotations

import copy
import json
import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import jsonschema
import yaml

from . import paths
from .errors import UserError
from .jsontypes import json_type

DRAFT = "https://json-schema.org/draft/2020-12/schema"
TITLE = "trainstack umbrella chart values"
COMMENT = ("Generated from values.yaml (its defaults and `# @schema` comments) by `trainstack docs`: "
           "do not edit; `trainstack docs --check` fails when it is stale.")
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
# A fragment with one of these says what the value is: the type of the default is not added.
DECIDES_TYPE = ("type", "$ref", "oneOf", "anyOf", "allOf", "const", "enum")


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


def _where(source: str, line: int, path: tuple[str, ...] | None = None) -> str:
    return f"{source}:{line}: " + (f"{'.'.join(path)}: " if path else "")


def _load_fragment(text: str, source: str, line: int, path: tuple[str, ...] | None) -> dict:
    try:
        fragment = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as err:
        problem = str(getattr(err, "problem", None) or err).splitlines()[0]
        raise UserError(f"{_where(source, line, path)}@schema annotation is not YAML or JSON ({problem})",
                        "write a mapping such as {pattern: \"^/\"}") from None
    if not isinstance(fragment, dict):
        raise UserError(f"{_where(source, line, path)}@schema annotation is not a mapping: {text.strip()!r}",
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
        raise UserError(f"{_where(source, line, path)}@schema annotation has an unknown keyword "
                        f"{unknown[0]!r}", "use JSON Schema 2020-12 keywords (pattern, enum, minimum, ...)")
    validator = jsonschema.Draft202012Validator(jsonschema.Draft202012Validator.META_SCHEMA,
                                                format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    error = jsonschema.exceptions.best_match(validator.iter_errors(fragment))
    if error is not None:
        at = "/".join(str(p) for p in error.absolute_path)
        raise UserError(f"{_where(source, line, path)}@schema annotation is not a valid JSON Schema"
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
    for number, line in enumerate(all_lines, 1):
        stripped = line.strip()
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
        loaded = yaml.safe_load(body) if body.strip() else None
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
                raise UserError(f"{_where(source, number, path)}@schema.def wants NAME or NAME extends BASE, "
                                f"not {body.strip()!r}")
            note.def_name, note.extends = words[0], (words[2] if len(words) == 3 else "")
        else:
            raise UserError(f"{_where(source, number, path)}unknown annotation @schema{kind}",
                            "use @schema, @schema.open, @schema.closed, @schema.def or @schema.defs")
    if note.open and note.closed:
        raise UserError(f"{_where(source, note.line, path)}@schema.open and @schema.closed on one key")
    return note


def _add_fragment(note: Note, fragment: dict, source: str, line: int, path: tuple[str, ...]) -> None:
    twice = set(fragment) & set(note.fragment)
    if twice:
        raise UserError(f"{_where(source, line, path)}@schema sets {min(twice)!r} twice")
    note.fragment.update(fragment)


class _Generator:
    def __init__(self, values: dict, parsed: Parsed, source: str) -> None:
        self.values, self.parsed, self.source = values, parsed, source
        self.defs: dict[str, dict] = copy.deepcopy(parsed.defs)
        self.def_first: dict[str, tuple[str, ...]] = {}  # def name -> its first member
        self.def_extends: dict[str, str] = {}
        self.def_owner: dict[tuple[str, str], tuple[str, ...]] = {}  # (def, key) -> the key that describes it
        self.annotated = set(parsed.notes)
        self.refs: list[tuple[tuple[str, ...], object]] = []

    def fail(self, path: tuple[str, ...], message: str, hint: str = "") -> UserError:
        line = self.parsed.lines.get(path) or (self.parsed.defs_line.get(path[-1].removeprefix("$defs."), 0)
                                               if path else 0)
        return UserError(f"{_where(self.source, line, path)}{message}", hint)

    def has_notes_below(self, path: tuple[str, ...]) -> bool:
        return any(p[:len(path)] == path and len(p) > len(path) for p in self.annotated)

    def node(self, path: tuple[str, ...], value, open_ctx: bool, in_def: bool) -> dict | None:
        """The schema of one key, or None for an unannotated key inside an open object."""
        note = self.parsed.notes.get(path)
        if open_ctx and note is None and not self.has_notes_below(path):
            return None
        note = note or Note(line=self.parsed.lines.get(path, 0))
        if note.closed and not open_ctx:
            raise self.fail(path, "@schema.closed outside an @schema.open object (objects are closed already)")
        fragment = note.fragment
        if "$ref" in fragment:
            for ref in _refs(fragment):
                self.check_ref(path, ref)
            if self.has_notes_below(path):
                below = min((p for p in self.annotated if p[:len(path)] == path and p != path), key=len)
                raise self.fail(below, f"annotation ignored: {'.'.join(path)} is `$ref` {fragment['$ref']}",
                                "annotate the definition instead")
            if note.def_name or note.open:
                raise self.fail(path, "`$ref` with @schema.def or @schema.open: the reference says it all")
            schema = copy.deepcopy(fragment)
        else:
            opened = (open_ctx and not note.closed) or note.open
            if note.open and not isinstance(value, dict) and value is not None:
                raise self.fail(path, "@schema.open on a value that is not an object")
            later = bool(note.def_name) and self.def_first.get(note.def_name, path) != path
            schema = self.infer(path, value, fragment, opened, in_def=in_def or bool(note.def_name), later=later)
        if note.def_name:
            schema = self.add_member(path, note, schema)
        description = self.parsed.descriptions.get(path)
        if description and not in_def:
            schema["description"] = description
        return schema

    def infer(self, path, value, fragment: dict, opened: bool, in_def: bool, later: bool = False) -> dict:
        """The schema a default implies, with the key's fragment over it. `later`: a later key of a
        definition, whose own schema only adds keys the definition lacks."""
        typed = any(k in fragment for k in DECIDES_TYPE)
        schema: dict = {"type": json_type(value)} if value is not None else {}
        if isinstance(value, list):
            if "items" not in fragment:
                kinds = sorted({json_type(item) for item in value})
                if not value and not opened and not later:
                    raise self.fail(path, "an empty list default says nothing about its items",
                                    "add `# @schema {items: {...}}` above it")
                if kinds:
                    schema["items"] = {"type": kinds[0] if len(kinds) == 1 else kinds}
        elif isinstance(value, dict):
            properties = {}
            existing = self.member_properties(path)
            for key, child in value.items():
                child_path = (*path, key)
                if key in existing:  # a later member of a definition: the first one describes it
                    self.check_discarded(child_path)
                    continue
                sub = self.node(child_path, child, open_ctx=opened, in_def=in_def)
                if sub is not None:
                    properties[key] = sub
            if properties:
                schema["properties"] = properties
            if not opened:
                if not value and not later and "additionalProperties" not in fragment and "properties" not in fragment:
                    raise self.fail(path, "an empty object default in a closed section accepts no key at all",
                                    "mark it `# @schema.open` (a map, a Kubernetes struct) or describe its keys")
                schema["additionalProperties"] = False
        elif value is None and not typed and not opened:
            raise self.fail(path, "a null default says nothing about its type",
                            "add `# @schema {type: ...}` (or oneOf, $ref) above it")
        if typed:
            schema.pop("type", None)
        for key, sub in fragment.items():
            if key == "properties":
                schema["properties"] = {**schema.get("properties", {}), **copy.deepcopy(sub)}
            else:
                schema[key] = copy.deepcopy(sub)
        for ref in _refs(fragment):
            self.check_ref(path, ref)
        return schema

    # -- definitions shared by several keys ------------------------------------------------------

    def member_properties(self, path) -> dict:
        """For a later member of a definition: the properties the definition already has."""
        note = self.parsed.notes.get(path)
        if not note or not note.def_name or self.def_first.get(note.def_name) in (None, path):
            return {}
        return self.defs[note.def_name].get("properties", {})

    def check_discarded(self, child_path) -> None:
        if child_path in self.annotated or self.has_notes_below(child_path):
            name = self.parsed.notes[child_path[:-1]].def_name
            owner = self.def_owner[(name, child_path[-1])]
            raise self.fail(child_path, f"annotation ignored: `{child_path[-1]}` of $defs/{name} is described by "
                            f"{'.'.join(owner)}", "annotate it there, where the definition first has it")

    def add_member(self, path, note: Note, schema: dict) -> dict:
        name = note.def_name
        if name in self.parsed.defs:
            raise self.fail(path, f"@schema.def {name}: {name!r} is also in @schema.defs "
                            f"(line {self.parsed.defs_line[name]})")
        for key in schema.get("properties", {}):
            self.def_owner.setdefault((name, key), (*path, key))
        if name not in self.def_first:
            self.def_first[name] = path
            self.defs[name] = schema
            if note.extends:
                self.def_extends[name] = note.extends
        else:
            if note.fragment or note.extends:
                raise self.fail(path, f"@schema on a later key of $defs/{name}",
                                f"put it on {'.'.join(self.def_first[name])}, the first key of the definition")
            first = self.defs[name]
            if first.get("type") != schema.get("type"):
                raise self.fail(path, f"$defs/{name} is of type {first.get('type')} ({'.'.join(self.def_first[name])}) "
                                f"but this default is of type {schema.get('type')}")
            for key, sub in schema.get("properties", {}).items():
                first.setdefault("properties", {})[key] = sub
        return {"$ref": f"#/$defs/{name}"}

    def check_ref(self, path, ref) -> None:
        self.refs.append((path, ref))

    def finish(self) -> dict:
        done: set[str] = set()

        def extend(name: str, seen: tuple[str, ...] = ()) -> None:
            if name in done or name not in self.def_extends:
                return
            base, first = self.def_extends[name], self.def_first[name]
            if base not in self.defs:
                raise self.fail(first, f"@schema.def {name} extends {base}: there is no $defs/{base}")
            if base in seen:
                raise self.fail(first, f"@schema.def {name} extends {base}: a cycle ({' -> '.join((*seen, base))})")
            extend(base, (*seen, name))
            own = self.defs[name].get("properties", {})
            inherited = copy.deepcopy(self.defs[base].get("properties", {}))
            for key in own:
                if key in inherited and (self.has_notes_below((*first, key)) or (*first, key) in self.annotated):
                    raise self.fail((*first, key), f"annotation ignored: `{key}` comes from $defs/{base}",
                                    "annotate it where the base definition describes it")
            self.defs[name]["properties"] = {**inherited, **{k: v for k, v in own.items() if k not in inherited}}
            done.add(name)

        for name in self.def_extends:
            extend(name)
        for path, ref in self.refs:
            match = re.fullmatch(r"#/\$defs/([^/]+)", ref) if isinstance(ref, str) else None
            if not match or match.group(1) not in self.defs:
                raise self.fail(path, f"`$ref` {ref!r} names no definition",
                                f"known: {', '.join(sorted(self.defs))}")
        return self.defs




def _refs(schema) -> list:
    if isinstance(schema, dict):
        found = [schema["$ref"]] if "$ref" in schema else []
        for sub in schema.values():
            found += _refs(sub)
        return found
    if isinstance(schema, list):
        return [r for sub in schema for r in _refs(sub)]
    return []


def generate(text: str, source: str = "values.yaml") -> dict:
    """The schema of a values.yaml text; raises UserError naming the line and key of a bad annotation."""
    parsed = parse(text, source)
    values = yaml.safe_load(text) or {}
    for path, line in parsed.lines.items():
        node = values
        for key in path:
            if not isinstance(node, dict) or key not in node:
                raise UserError(f"{source}:{line}: {'.'.join(path)}: not a key of the values "
                                "(the comment parser lost its place: keep one key per line, lists in flow style)")
            node = node[key]
    generator = _Generator(values, parsed, source)
    for name, schema in parsed.defs.items():
        generator.refs += [((f"$defs.{name}",), ref) for ref in _refs(schema)]
    root = generator.infer((), values, {}, opened=False, in_def=False)
    defs = generator.finish()
    schema = {"$schema": DRAFT, "$comment": COMMENT, "title": TITLE, **root}
    if defs:
        schema["$defs"] = defs
    _check_defaults(schema, values, parsed, source)
    return schema


def _check_defaults(schema: dict, values: dict, parsed: Parsed, source: str) -> None:
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(values), key=lambda e: list(map(str, e.absolute_path)))
    if not errors:
        return
    error = errors[0]
    path = tuple(str(p) for p in error.absolute_path)
    key = path
    while key and key not in parsed.lines:
        key = key[:-1]
    line = parsed.lines.get(key, 0)
    raise UserError(f"{source}:{line}: {'.'.join(path) or '(the values)'}: the default "
                    f"{json.dumps(error.instance)[:80]} breaks its own schema: {error.message[:200]}",
                    "fix the @schema annotation or the default")


def render(chart_dir: Path | None = None) -> str:
    """values.schema.json's text, generated from the chart's values.yaml."""
    chart_dir = chart_dir or paths.chart_dir()
    values_path = chart_dir / "values.yaml"
    try:
        source = str(values_path.relative_to(paths.repo_root()))
    except ValueError:
        source = str(values_path)
    return json.dumps(generate(values_path.read_text(), source), indent=2, ensure_ascii=False) + "\n"
