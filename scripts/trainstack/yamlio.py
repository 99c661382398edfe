"""YAML parsing with libyaml when PyYAML was built with it (its wheels are), else pure Python.

Renders and CRDs are megabytes: libyaml parses them about ten times faster, with the same
result, and writes them about five times faster (`dump`, `dump_all`: `trainstack render`'s stream
and folders, what goes to `kubectl apply`). libyaml folds long quoted strings at spaces where
PyYAML's own emitter escapes them: the same values in other lines. The files people edit
(values, teams, releases) stay on PyYAML's emitter or ruamel.yaml, as they were written.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml

LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def load(text: str | bytes) -> Any:
    return yaml.load(text, Loader=LOADER)  # LOADER is a safe loader


def load_all(text: str | bytes) -> Iterator[Any]:
    documents: Iterator[Any] = yaml.load_all(text, Loader=LOADER)  # LOADER is a safe loader
    return documents


def dump(obj: Any, sort_keys: bool = True) -> str:
    """OBJ as one YAML document in block style (what yaml.safe_dump writes, with libyaml)."""
    text: str = yaml.dump(obj, Dumper=DUMPER, sort_keys=sort_keys, default_flow_style=False)
    return text


def dump_all(objs: list[Any], sort_keys: bool = True) -> str:
    """OBJS as YAML documents separated by `---` lines (what yaml.safe_dump_all writes, with libyaml)."""
    text: str = yaml.dump_all(objs, Dumper=DUMPER, sort_keys=sort_keys, default_flow_style=False)
    return text


def error_line(err: Exception, text: str | None = None, offset: int = 0) -> str:
    """One line saying what is wrong with YAML that did not parse (a yaml.YAMLError), and where (`line N, column M`).
    A tab that indents a line is named as such: libyaml's own words for it ("found character that
    cannot start any token") never say "tab". TEXT is what was parsed (else the file the error names),
    OFFSET the number of lines before it in its file."""
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    parts = (getattr(err, "context", None), getattr(err, "problem", None))
    what = " ".join(str(x) for x in parts if x) or (str(err).splitlines() or ["invalid YAML"])[0]
    if mark is None:
        return what
    where = f"line {offset + mark.line + 1}, column {mark.column + 1}"
    if text is None and getattr(mark, "name", None) and not str(mark.name).startswith("<"):
        try:
            with open(mark.name, encoding="utf-8", errors="replace") as handle:
                text = handle.read()
        except OSError:
            text = None
    lines = (text or "").splitlines()
    line = lines[mark.line] if mark.line < len(lines) else ""
    indent = line[:len(line) - len(line.lstrip(" \t"))]
    if "\t" in indent and mark.column <= len(indent) or "'\\t'" in what:
        return f"a tab indents {where}: YAML indents with spaces only"
    return f"{what} ({where})"
