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
from pathlib import Path

import jsonschema

from . import paths, yamlio
from .errors import UserError
from .jsontypes import json_type
from .schemanotes import Note, Parsed, location, parse

DRAFT = "https://json-schema.org/draft/2020-12/schema"
TITLE = "trainstack umbrella chart values"
COMMENT = ("Generated from values.yaml (its defaults and `# @schema` comments) by `trainstack docs`: "
           "do not edit; `trainstack docs --check` fails when it is stale.")
# A fragment with one of these says what the value is: the type of the default is not added.
DECIDES_TYPE = ("type", "$ref", "oneOf", "anyOf", "allOf", "const", "enum")


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
        return UserError(f"{location(self.source, line, path)}{message}", hint)

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
    values = yamlio.load(text) or {}
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
