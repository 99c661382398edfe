"""Findings and the four ways to print them (text, json, junit, sarif).

Every check produces `Finding`s; this module is the only place that knows the output
formats, so each check stays about Kubernetes semantics and CI systems get their formats.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote
from xml.sax.saxutils import escape, quoteattr

from .. import __version__

ERROR = "error"
WARNING = "warning"

FORMATS = ("text", "json", "junit", "sarif")
_SURROGATE = re.compile("[\ud800-\udfff]")

# What each rule checks (SARIF rule descriptions and `--output text` legends).
RULES: dict[str, str] = {
    "yaml-syntax": "the document must be well-formed YAML or JSON",
    "empty": "a file must hold at least one object",
    "not-an-object": "a Helm values file or a kustomization is named as what it is, not validated as an object",
    "duplicate-key": "a mapping must not repeat a key (the API server rejects duplicate fields)",
    "json-value": "every value must be representable in JSON (no NaN/Infinity, no unsupported tags)",
    "invalid-text": "the text must be UTF-8 and every string Unicode text (no unpaired UTF-16 surrogates)",
    "type-meta": "every document must be an object with string apiVersion and kind",
    "unknown-kind": "the kind must be built in or defined by a known CRD",
    "schema": "the object must match the OpenAPI schema of its kind",
    "unknown-field": "fields that the schema does not define are rejected (strict field validation)",
    "required": "required fields must be present",
    "list-map": "x-kubernetes-list-type map/set entries must be unique",
    "embedded-resource": "an embedded resource must have apiVersion, kind and valid metadata",
    "cel": "the CRD's x-kubernetes-validations rules must hold",
    "metadata": "metadata name, namespace, labels and annotations must use the formats the API server enforces",
    "quantity": "resource quantities must parse",
    "policy": "ValidatingAdmissionPolicy validations must hold",
    "policy-config": "ValidatingAdmissionPolicies and bindings must be evaluable",
    "internal-error": "trainstack validate itself failed on the document (a bug)",
}


@dataclass
class Finding:
    """One problem in one document; `path` is a JSON pointer into the document."""

    file: str
    line: int
    document: int
    apiVersion: str
    kind: str
    namespace: str
    name: str
    rule: str
    severity: str
    message: str
    path: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def object_label(self) -> str:
        kind = self.kind or "document"
        if self.name:
            return f"{kind} {self.namespace + '/' if self.namespace else ''}{self.name}"
        return f"{kind} #{self.document}"


@dataclass
class Result:
    """What a validation run found: counts plus findings in a stable order."""

    documents: int = 0
    findings: list[Finding] = field(default_factory=list)

    @property
    def errors(self) -> int:
        return sum(1 for f in self.findings if f.severity == ERROR)

    @property
    def warnings(self) -> int:
        return sum(1 for f in self.findings if f.severity == WARNING)

    def sort(self) -> None:
        self.findings.sort(key=lambda f: (f.file, f.document, f.line, f.path, f.rule, f.message))

    def summary(self) -> dict[str, int]:
        return {"documents": self.documents, "errors": self.errors, "warnings": self.warnings}


def render(result: Result, fmt: str) -> str:
    text = {"text": to_text, "json": to_json, "junit": to_junit, "sarif": to_sarif}[fmt](result)
    # A lone surrogate (a file name Python read with surrogateescape) cannot be written as UTF-8: write it as
    # the \uXXXX escape, which is the same string in JSON and SARIF and readable text in JUnit and text.
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def to_text(result: Result) -> str:
    lines = []
    for f in result.findings:
        where = f"{f.file}:{f.line}" if f.line else f.file
        lines.append(f"{where}: {f.severity}: {f.object_label}: {f.message} [{f.rule}]")
    s = result.summary()
    lines.append(f"{s['documents']} documents, {s['errors']} errors, {s['warnings']} warnings")
    return "\n".join(lines) + "\n"


def to_json(result: Result) -> str:
    return json.dumps({"summary": result.summary(), "findings": [f.to_dict() for f in result.findings]},
                      indent=2, ensure_ascii=False) + "\n"


def to_junit(result: Result) -> str:
    """One testsuite per file, one testcase per finding (a file without findings gets one passing case)."""
    by_file: dict[str, list[Finding]] = defaultdict(list)
    for f in result.findings:
        by_file[f.file].append(f)
    suites = []
    for file, found in sorted(by_file.items()):
        cases = []
        for f in found:
            name = quoteattr(f"{f.object_label} {f.path or '/'} [{f.rule}]")
            tag = "failure" if f.severity == ERROR else "system-out"
            body = escape(f"{f.file}:{f.line}: {f.message}")
            if tag == "failure":
                cases.append(f'    <testcase classname={quoteattr(file)} name={name}>\n'
                             f'      <failure type={quoteattr(f.rule)} message={quoteattr(f.message)}>{body}</failure>\n'
                             f'    </testcase>')
            else:
                cases.append(f'    <testcase classname={quoteattr(file)} name={name}>\n'
                             f'      <system-out>warning: {body}</system-out>\n    </testcase>')
        failures = sum(1 for f in found if f.severity == ERROR)
        suites.append(f'  <testsuite name={quoteattr(file)} tests="{len(found)}" failures="{failures}" errors="0">\n'
                      + "\n".join(cases) + "\n  </testsuite>")
    if not suites:
        suites.append('  <testsuite name="trainstack validate" tests="1" failures="0" errors="0">\n'
                      f'    <testcase classname="trainstack validate" name="{result.documents} documents valid"/>\n'
                      '  </testsuite>')
    s = result.summary()
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<testsuites name="trainstack validate" tests="{max(len(result.findings), 1)}" '
            f'failures="{s["errors"]}" errors="0">\n' + "\n".join(suites) + "\n</testsuites>\n")


def to_sarif(result: Result, version: str = "") -> str:
    """SARIF 2.1.0: one run, the rules used, one result per finding with a physical location."""
    used = sorted({f.rule for f in result.findings} | set(RULES))
    rules = [{"id": r, "name": r, "shortDescription": {"text": RULES.get(r, r)},
              "defaultConfiguration": {"level": "error"}} for r in used]
    index = {r: i for i, r in enumerate(used)}
    results = []
    for f in result.findings:
        region = {"startLine": max(f.line, 1)}
        results.append({
            "ruleId": f.rule,
            "ruleIndex": index[f.rule],
            "level": "error" if f.severity == ERROR else "warning",
            "message": {"text": f"{f.object_label}: {f.message}"},
            "locations": [{"physicalLocation": {"artifactLocation": {"uri": _uri(f.file)}, "region": region},
                           "logicalLocations": [{"name": f.object_label,
                                                 "fullyQualifiedName": f"{f.object_label}{f.path}",
                                                 "kind": "object"}]}],
            "properties": {"apiVersion": f.apiVersion, "kind": f.kind, "namespace": f.namespace, "name": f.name,
                           "document": f.document, "path": f.path},
        })
    doc = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "trainstack validate", "version": version or __version__,
                                "informationUri": "https://github.com/kubeflow/trainer", "rules": rules}},
            "results": results,
            "columnKind": "unicodeCodePoints",
        }],
    }
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def _uri(file: str) -> str:
    """A SARIF artifact URI: file:// for absolute paths, a relative reference otherwise."""
    if file == "-":
        return "stdin"
    if file.startswith("<"):  # a rendered environment: "<render --env dev>" -> "render-env-dev"
        return quote("-".join(file.strip("<>").replace("-", " ").split()), safe="-")
    if Path(file).is_absolute():
        return Path(file).as_uri()
    return quote(file, safe="/._-")
