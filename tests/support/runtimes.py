"""Fast reading of chart renders for the runtime tests: the chart with its CRDs is megabytes of
YAML, so only the documents of the wanted kinds are parsed, with libyaml."""

from __future__ import annotations

import re

from conftest import SEPARATOR, helm_template
from trainstack import yamlio

KIND = re.compile(r"^kind:\s*(\S+)\s*$", re.MULTILINE)


def docs_of_kind(text: str, *kinds: str) -> list[dict]:
    found = []
    for chunk in SEPARATOR.split(text):
        match = KIND.search(chunk)
        if match and match.group(1) in kinds:
            doc = yamlio.load(chunk)
            if isinstance(doc, dict) and doc.get("kind") in kinds:
                found.append(doc)
    return found


def by_name(docs: list[dict]) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs}


def rendered_runtimes(*args: str) -> dict[str, dict]:
    """The ClusterTrainingRuntimes `helm template` renders with these arguments, by name."""
    return by_name(docs_of_kind(helm_template(*args).stdout, "ClusterTrainingRuntime"))


def policy_params(*args: str) -> dict[str, str]:
    maps = docs_of_kind(helm_template(*args).stdout, "ConfigMap")
    return next(d for d in maps if d["metadata"]["name"] == "trainstack-policy-params")["data"]
