"""Runs every check over every document, over two processes when the input is large.

Per document, in the API server's order: parse problems, type meta, kind lookup, null
pruning and defaulting, the OpenAPI schema (jsonschema-rs), metadata formats, built-in Go
validations or the CRD's list maps/embedded resources/CEL rules. CRDs found among the inputs
are registered and the documents they define are validated again; with `--policies` the
ValidatingAdmissionPolicies found are evaluated over all objects at the end.
"""

from __future__ import annotations

import gc
import json
import multiprocessing
import os
import re
from dataclasses import dataclass, field
from typing import Any

from ..jsontypes import json_type
from ..quantity import EXAMPLES as QUANTITY_EXAMPLES
from . import documents, formats, policies, semantics, structural
from .documents import Document
from .report import ERROR, WARNING, Finding, Result
from .schemas import Catalog, KindInfo, _Broken

PARALLEL_BYTES = 2 * 1024 * 1024  # below this, one process is faster than starting workers
PART_BYTES = 1024 * 1024  # large files are cut into parts of about this size at document markers


@dataclass
class Options:
    strict: bool = False
    policies: bool = False
    jobs: int = 0  # 0: one per CPU (at most 2 unless asked)


@dataclass
class Object:
    """A parsed object kept for the policy pass and for CRD re-validation."""

    file: str
    document: int
    line: int
    data: dict


@dataclass
class Outcome:
    """What validating some documents produced (it crosses process boundaries, so keep it plain)."""

    documents: int = 0
    findings: list[Finding] = field(default_factory=list)
    crds: list[tuple[str, dict]] = field(default_factory=list)
    unknown: list[tuple[str, int]] = field(default_factory=list)  # (file, document) of unknown kinds
    objects: list[Object] = field(default_factory=list)

    def merge(self, other: Outcome) -> None:
        self.documents += other.documents
        self.findings.extend(other.findings)
        self.crds.extend(other.crds)
        self.unknown.extend(other.unknown)
        self.objects.extend(other.objects)


class Validator:
    """Validates documents against one catalog (one per process)."""

    def __init__(self, catalog: Catalog, options: Options) -> None:
        self.catalog = catalog
        self.options = options
        self._plans: dict[str, structural.Plan | None] = {}
        self.kube_minor = int(catalog.kube_version.lstrip("v").split(".")[1])

    def plan(self, info: KindInfo) -> structural.Plan | None:
        if info.key not in self._plans:
            self._plans[info.key] = structural.build_plan(info.structural) if info.structural else None
        return self._plans[info.key]

    # -- one document -------------------------------------------------------------------------
    def document(self, doc: Document, out: Outcome, keep: bool = False) -> None:
        out.documents += 1
        try:
            self._document(doc, out, keep)
        except RecursionError:
            out.findings.append(Finding(doc.file, doc.line, doc.index, "", "", "", "", "yaml-syntax", ERROR,
                                        "the document nests too deeply to be validated", ""))
        except Exception as err:  # noqa: BLE001 - one document must not take the run (and its JSON) down
            out.findings.append(Finding(doc.file, doc.line, doc.index, "", "", "", "", "internal-error", ERROR,
                                        f"validate failed on this document: {type(err).__name__}: {err} "
                                        "(a bug in trainstack validate; please report it)", ""))

    def _document(self, doc: Document, out: Outcome, keep: bool) -> None:
        data = doc.data
        api_version = data.get("apiVersion") if isinstance(data, dict) else None
        kind = data.get("kind") if isinstance(data, dict) else None
        meta = data.get("metadata") if isinstance(data, dict) else None
        meta = meta if isinstance(meta, dict) else {}
        ident = (_text(api_version), _text(kind), _text(meta.get("namespace")), _text(meta.get("name")))
        findings = out.findings

        def add(rule: str, message: str, path: str = "", severity: str = ERROR, line: int = 0) -> None:
            findings.append(Finding(doc.file, line or doc.line_of(path), doc.index, *ident, rule, severity,
                                    message, doc.prefix + path))

        for problem in doc.problems:
            findings.append(Finding(doc.file, problem.line or doc.line, doc.index, *ident, problem.rule,
                                    problem.severity, problem.message, problem.path))
        if data is None and doc.problems:
            return
        if not isinstance(data, dict):
            add("type-meta", f"a Kubernetes object must be a mapping, got {json_type(data)}")
            return
        if api_version is None and kind is None and _is_values_file(doc.file):
            add("not-an-object", "a Helm values file, not a Kubernetes object: not validated (validate what the chart "
                "renders with it: trainstack validate --env ENV)", severity=WARNING)
            return
        if isinstance(api_version, str) and api_version.startswith(KUSTOMIZE_GROUP + "/"):
            add("not-an-object", f"kustomize's own file ({kind}), not a Kubernetes object: not validated (validate what "
                "it builds: kustomize build DIR | trainstack validate -)", "/kind", WARNING)
            return
        if not (isinstance(api_version, str) and api_version and isinstance(kind, str) and kind):
            for name, value in (("apiVersion", api_version), ("kind", kind)):
                if isinstance(value, str) and value:
                    continue
                what = "is required" if value in (None, "") else f"must be a string, got {json_type(value)}"
                add("type-meta", f"{name} {what}: every Kubernetes object needs apiVersion and kind",
                    f"/{name}" if name in data else "")
            return
        if kind == "CustomResourceDefinition" and api_version == "apiextensions.k8s.io/v1":
            out.crds.append((doc.file, data))
        info = self.catalog.lookup(api_version, kind)
        if info is None:
            out.unknown.append((doc.file, doc.index))
            add("unknown-kind", self._unknown(api_version, kind), "/kind",
                ERROR if self.options.strict else WARNING)
            if keep:
                out.objects.append(Object(doc.file, doc.index, doc.line, data))
            return
        self._object(doc, data, info, add)
        if keep:
            out.objects.append(Object(doc.file, doc.index, doc.line, data))

    def _object(self, doc: Document, data: dict, info: KindInfo, add) -> None:
        plan = None
        if doc.has_null:
            structural.prune_nulls(data, info.structural, info.builtin)
        if not info.builtin:
            plan = self.plan(info)
            if plan is not None and (plan.defaults or plan.props or plan.items or plan.addl):
                structural.apply_defaults(data, plan)
        validator = self.catalog.validator(info.key)
        schema_ok = True
        if isinstance(validator, _Broken):
            add("schema", validator.message)
            schema_ok = False
        elif not validator.is_valid(data):
            schema_ok = False
            for err in validator.iter_errors(data):
                for rule, path, message in _describe(err, info):
                    add(rule, message, path)
        meta = data.get("metadata")
        for sub, message, severity in formats.check_metadata(meta, info.kind, info.builtin, info.namespaced,
                                                             kube_minor=self.kube_minor):
            add("metadata", message, "/metadata" + sub, severity)
        if info.builtin:
            for rule, path, message in semantics.check(data, info.kind, info.apiVersion):
                add(rule, message, path)
        elif schema_ok and plan is not None:
            for rule, path, message in structural.check(data, plan):
                add(rule, message, path)

    def _unknown(self, api_version: str, kind: str) -> str:
        group = api_version.rpartition("/")[0] if "/" in api_version else ""
        served = sorted({k.apiVersion for k in self.catalog.kinds.values() if k.kind == kind})
        base = (f"unknown kind {kind} ({api_version}): no built-in schema in Kubernetes "
                f"{self.catalog.kube_version} and no known CRD defines it")
        if served:
            return base + f"; {kind} is served as {', '.join(served)}"
        if group in self.catalog.groups:
            return base + f"; the group {group} is known but has no kind {kind} in {api_version}"
        return base + " (add its CRD to the validated paths)"

    # -- files ----------------------------------------------------------------------------------
    def text(self, file: str, text: str, out: Outcome, keep: bool, base_index: int = 0, base_line: int = 0) -> None:
        seen = False
        for doc in documents.documents(file, text, base_index, base_line):
            seen = True
            self.document(doc, out, keep)
            doc.node = None
        if not seen and base_index == 0 and base_line == 0:  # kubectl apply: "no objects passed to apply"
            out.findings.append(Finding(file, 1, 0, "", "", "", "", "empty", ERROR,
                                        "the file has no Kubernetes objects (it is empty or holds only comments)", ""))


KUSTOMIZE_GROUP = "kustomize.config.k8s.io"  # Kustomization, Component: kustomize reads them, the API server never
_VALUES_FILE = re.compile(r"(^|[-_.])values([-_.][^/]*)?\.ya?ml$")


def _is_values_file(file: str) -> bool:
    """values.yaml, values-prod.yaml, prod.values.yaml, ...: Helm values files by their name."""
    return bool(_VALUES_FILE.search(os.path.basename(file)))


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ("" if value is None else json.dumps(value, default=str)[:100])




def _short(value: Any) -> str:
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


def _field(parts: list) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (("." if text else "") + str(part))
    return text or "<root>"


def _describe(err, info: KindInfo) -> list[tuple[str, str, str]]:
    """(rule, JSON pointer, message) for one jsonschema-rs error, in the API server's words."""
    parts = list(err.instance_path)
    where = _field(parts)
    path = documents.pointer(parts)
    kind = type(err.kind).__name__
    details = err.kind.as_dict() if hasattr(err.kind, "as_dict") else {}
    value = err.instance
    what = f"{info.kind} {info.apiVersion}"
    if kind == "AdditionalProperties":
        return [("unknown-field", documents.pointer(parts + [name]),
                 (f"{_field(parts + [name])}: unknown field \"{name}\": {what} does not define it here "
                 "(strict field validation rejects unknown fields)")) for name in details.get("unexpected", [])]
    if kind == "Required":
        name = details.get("property", "")
        return [("required", documents.pointer(parts + [name]), f"{_field(parts + [name])}: Required value")]
    if kind == "Type":
        types = details.get("types") or []
        expected = " or ".join(types) if isinstance(types, list) else str(types)
        return [("schema", path, (f"{where}: Invalid value: {_short(value)}: expected {expected}, "
                                  f"got {json_type(value)}"))]
    if kind == "Enum":
        options = ", ".join(_short(o) for o in details.get("options", []))
        if parts in (["apiVersion"], ["kind"]):
            return [("type-meta", path, f"{where}: Invalid value: {_short(value)}: must be {options}")]
        return [("schema", path, f"{where}: Unsupported value: {_short(value)}: supported values: {options}")]
    if kind == "Pattern":
        pattern = details.get("pattern", "")
        if pattern == formats.QUANTITY_PATTERN:
            return [("quantity", path, f"{where}: {_short(value)} is not a Kubernetes quantity ({QUANTITY_EXAMPLES})")]
        if pattern in (formats.RFC3339_PATTERN, formats.CRD_DATETIME_PATTERN):
            return [("schema", path, (f"{where}: Invalid value: {_short(value)}: must be an RFC 3339 date-time "
                                      "(e.g. 2006-01-02T15:04:05Z)"))]
        if pattern == formats.BASE64_PATTERN:
            return [("schema", path, f"{where}: Invalid value: {_short(value)}: must be base64-encoded")]
        return [("schema", path, f"{where}: Invalid value: {_short(value)}: should match '{pattern}'")]
    limits = {
        "MaxLength": "must have at most {limit} characters", "MinLength": "must have at least {limit} characters",
        "Maximum": "must be less than or equal to {limit}", "Minimum": "must be greater than or equal to {limit}",
        "ExclusiveMaximum": "must be less than {limit}", "ExclusiveMinimum": "must be greater than {limit}",
        "MaxItems": "must have at most {limit} items", "MinItems": "must have at least {limit} items",
        "MaxProperties": "must have at most {limit} properties",
        "MinProperties": "must have at least {limit} properties",
        "MultipleOf": "must be a multiple of {multiple_of}",
    }
    if kind in limits:
        text = limits[kind].format(limit=details.get("limit"), multiple_of=details.get("multiple_of"))
        if kind in ("Maximum", "Minimum") and details.get("limit") in (2**31 - 1, -(2**31), 2**63 - 1, -(2**63)):
            text += " (the field is a 32-bit integer)" if abs(details["limit"]) < 2**32 else " (int64)"
        return [("schema", path, f"{where}: Invalid value: {_short(value)}: {text}")]
    if kind == "UniqueItems":
        return [("list-map", path, f"{where}: Duplicate value: the items must be unique (x-kubernetes-list-type: set)")]
    return [("schema", path, f"{where}: Invalid value: {_short(value)}: {err.message}")]


# ----------------------------------------------------------------------------- orchestration
_worker: Validator | None = None


def _init_worker(validator: Validator) -> None:
    global _worker
    _worker = validator
    gc.disable()


def _job(job: tuple) -> Outcome:
    file, text, base_index, base_line, keep = job
    out = Outcome()
    assert _worker is not None
    if text is None:
        text, problem = documents.read(file)
        if problem is not None:
            out.findings.append(Finding(file, problem.line, 0, "", "", "", "", problem.rule, ERROR, problem.message))
            return out
    _worker.text(file, text, out, keep, base_index, base_line)
    return out


def _jobs(files: list[str], texts: dict[str, str], parallel: bool, keep: bool) -> list[tuple]:
    jobs: list[tuple[str, str | None, int, int, bool]] = []
    for file in files:
        text = texts.get(file)
        if parallel and text is None:
            try:
                size = os.path.getsize(file)
            except OSError:
                size = 0
            if size > 2 * PART_BYTES:
                text, problem = documents.read(file)
                if problem is not None:
                    jobs.append((file, None, 0, 0, keep))
                    continue
        if parallel and text is not None and len(text) > 2 * PART_BYTES:
            jobs.extend((file, part, index, line, keep) for index, line, part in documents.parts(text, PART_BYTES))
        else:
            jobs.append((file, text, 0, 0, keep))
    return jobs


def run(catalog: Catalog, files: list[str], options: Options, texts: dict[str, str] | None = None) -> Result:
    """Validate files (texts holds the text of '-' and rendered environments) and return the result."""
    texts = dict(texts or {})
    validator = Validator(catalog, options)
    sizes = 0
    for file in files:
        if file in texts:
            sizes += len(texts[file])
        else:
            try:
                sizes += os.path.getsize(file)
            except OSError:
                pass
    jobs_wanted = options.jobs or min(os.cpu_count() or 1, 2)
    parallel = jobs_wanted > 1 and sizes >= PARALLEL_BYTES
    keep = options.policies
    jobs = _jobs(files, texts, parallel, keep)
    outcome = Outcome()
    was_enabled = gc.isenabled()
    gc.disable()  # parsed documents are acyclic; the collector would only rescan them
    try:
        if parallel and len(jobs) > 1:
            context = multiprocessing.get_context("fork")
            with context.Pool(jobs_wanted, initializer=_init_worker, initargs=(validator,)) as pool:
                for part in pool.imap(_job, jobs, chunksize=max(1, len(jobs) // (jobs_wanted * 8))):
                    outcome.merge(part)
        else:
            _init_worker(validator)
            for job in jobs:
                outcome.merge(_job(job))
    finally:
        if was_enabled:
            gc.enable()
    if outcome.crds and outcome.unknown:
        _revalidate_with_input_crds(validator, outcome, texts)
    if options.policies:
        judged = policies.evaluate(outcome.objects, catalog)
        _lines_of_fields(judged, texts)
        outcome.findings.extend(judged)
    order = {file: i for i, file in enumerate(files)}
    outcome.findings.sort(key=lambda f: (order.get(f.file, len(order)), f.document, f.line, f.path, f.rule, f.message))
    return Result(documents=outcome.documents, findings=outcome.findings)


def _lines_of_fields(findings: list[Finding], texts: dict[str, str]) -> None:
    """Give findings that name a field (a JSON pointer) the line of that field: the objects kept for the
    policy pass hold their data, not where each field is, so their files are read again (only those)."""
    by_file: dict[str, list[Finding]] = {}
    for finding in findings:
        if finding.path:
            by_file.setdefault(finding.file, []).append(finding)
    for file, found in by_file.items():
        text = texts.get(file)
        if text is None:
            text, problem = documents.read(file)
            if text is None or problem is not None:
                continue
        docs: dict[int, list[documents.Document]] = {}
        for doc in documents.documents(file, text):
            docs.setdefault(doc.index, []).append(doc)
        for finding in found:
            for doc in docs.get(finding.document, []):
                data = doc.data if isinstance(doc.data, dict) else {}
                meta = data.get("metadata")
                name = meta.get("name") if isinstance(meta, dict) else None
                if data.get("kind") == finding.kind and str(name or "") == finding.name:
                    finding.line = doc.line_of(finding.path)
                    finding.path = doc.prefix + finding.path
                    break


def _revalidate_with_input_crds(validator: Validator, outcome: Outcome, texts: dict[str, str]) -> None:
    """CRDs among the inputs define kinds: validate the documents that were unknown against them."""
    added = False
    for file, crd in outcome.crds:
        if validator.catalog.add_crd(crd, file):
            added = True
    if not added:
        return
    unknown: dict[str, set[int]] = {}
    for file, index in outcome.unknown:
        unknown.setdefault(file, set()).add(index)
    outcome.findings = [f for f in outcome.findings
                        if not (f.rule == "unknown-kind" and f.document in unknown.get(f.file, ()))]
    again = Outcome()
    for file, indexes in unknown.items():
        text = texts.get(file)
        if text is None:
            text, _ = documents.read(file)
        if text is None:
            continue
        for doc in documents.documents(file, text):
            if doc.index in indexes:
                validator.document(doc, again, keep=False)
    parse_rules = ("yaml-syntax", "duplicate-key", "json-value", "invalid-text")  # already reported once
    outcome.findings.extend(f for f in again.findings if f.rule not in parse_rules)
