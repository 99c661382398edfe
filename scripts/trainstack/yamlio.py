"""YAML parsing with libyaml when PyYAML was built with it (its wheels are), else pure Python.

Renders and CRDs are megabytes: libyaml parses them about ten times faster, with the same
result. Dumping stays on PyYAML's own emitter, whose output trainstack's files and renders are
written in (libyaml folds long quoted strings differently).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml

LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load(text: str | bytes) -> Any:
    return yaml.load(text, Loader=LOADER)  # LOADER is a safe loader


def load_all(text: str | bytes) -> Iterator[Any]:
    documents: Iterator[Any] = yaml.load_all(text, Loader=LOADER)  # LOADER is a safe loader
    return documents
