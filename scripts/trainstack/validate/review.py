"""The field-by-field review of what a tenant controls, checked against the pinned CRDs.

Every field a team member can set is walked from the pinned Trainer CRDs' schemas (TrainJob and
TrainingRuntime; the PodSpec and containers they embed are k8s.io/api's, generated into the
CRDs): the TrainJob's own fields, the pod and container fields its runtimePatches open, and a
team runtime's whole JobSet, Job, pod and container spec. `docs/guardrails-review.yaml` rules on each
(a rule key of charts/trainstack/files/policies/, or who else enforces it and why that is enough). A field is reviewed
when the review names it, or an ancestor with `subtree: true`; `unreviewed()` lists the rest, so
an upstream bump that adds a field fails tests/chart/test_field_review.py until someone rules on
it. `write()` renders the table into docs/guardrails.md between the generated markers.

    python -m trainstack.validate.review write|check
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from .. import paths, yamlio

REVIEW_FILE = "docs/guardrails-review.yaml"
DOC_FILE = "docs/guardrails.md"
BEGIN, END = "<!-- BEGIN generated: field review -->", "<!-- END generated: field review -->"

# Long schema paths shown by the scope they belong to (first match wins).
_SCOPES = [
    ("TrainJob", r"spec\.runtimePatches\[\]\.trainingRuntimeSpec\.template\.spec\.replicatedJobs\[\]\.template\.spec\.template\.spec\.(?:containers|initContainers)\[\]\.", "patch container"),
    ("TrainJob", r"spec\.runtimePatches\[\]\.trainingRuntimeSpec\.template\.spec\.replicatedJobs\[\]\.template\.spec\.template\.spec\.", "patch pod"),
    ("TrainJob", r"spec\.runtimePatches\[\]\.", "patch"),
    ("TrainingRuntime", r"spec\.template\.spec\.replicatedJobs\[\]\.template\.spec\.template\.spec\.(?:containers|initContainers)\[\]\.", "container"),
    ("TrainingRuntime", r"spec\.template\.spec\.replicatedJobs\[\]\.template\.spec\.template\.spec\.", "pod"),
    ("TrainingRuntime", r"spec\.template\.spec\.replicatedJobs\[\]\.template\.spec\.", "job"),
    ("TrainingRuntime", r"spec\.template\.spec\.replicatedJobs\[\]\.", "replicatedJob"),
]
WHO = {"TrainJob": "team member (edit)", "TrainingRuntime": "team with ownRuntimes"}
# Not rule keys: who else decides, named in the review's `rule`.
ENFORCERS = {"none", "pod-security", "kueue", "crd", "trainer", "priority-admission", "rbac", "platform", "api-server"}


def _walk(schema: dict, path: str, out: set[str]) -> None:
    props = schema.get("properties")
    if path:
        out.add(path)
    if isinstance(props, dict):
        for name, sub in props.items():
            _walk(sub, f"{path}.{name}" if path else name, out)
    items = schema.get("items")
    if isinstance(items, dict) and isinstance(items.get("properties"), dict):
        for name, sub in items["properties"].items():
            _walk(sub, f"{path}[].{name}", out)
    additional = schema.get("additionalProperties")
    if isinstance(additional, dict) and isinstance(additional.get("properties"), dict):
        for name, sub in additional["properties"].items():
            _walk(sub, f"{path}{{}}.{name}", out)


def key(kind: str, path: str) -> str:
    """`Kind scope:rest` for a schema path of kind (metadata and status are not the tenant's to review here)."""
    for scope_kind, pattern, scope in _SCOPES:
        if scope_kind == kind and re.match(pattern, path):
            return f"{kind} {scope}:{re.sub('^' + pattern, '', path)}"
    return f"{kind}:{path}"


def fields_of(crd: dict) -> set[str]:
    """Review keys of every field under spec of a CRD's served storage version."""
    kind = crd["spec"]["names"]["kind"]
    versions = [v for v in crd["spec"]["versions"] if v.get("storage")] or crd["spec"]["versions"]
    spec = versions[0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    found: set[str] = set()
    _walk(spec, "spec", found)
    return {key(kind, p) for p in found if p != "spec"}


def load_review(root: Path | None = None) -> dict[str, dict]:
    data = yamlio.load(((root or paths.repo_root()) / REVIEW_FILE).read_text())
    return {k: v for k, v in (data.get("fields") or {}).items()}


def covering(field: str, review: dict[str, dict]) -> str | None:
    """The review entry that rules on field: itself, or the nearest ancestor with subtree: true."""
    if field in review:
        return field
    scope, _, rest = field.partition(":")
    parts = rest.split(".")
    for i in range(len(parts) - 1, 0, -1):
        parent = ".".join(parts[:i])
        for name in (parent, parent.removesuffix("[]").removesuffix("{}")):
            entry = review.get(f"{scope}:{name}")
            if entry is not None and entry.get("subtree"):
                return f"{scope}:{name}"
    return None


def unreviewed(fields: set[str], review: dict[str, dict]) -> list[str]:
    return sorted(f for f in fields if covering(f, review) is None)


def stale(fields: set[str], review: dict[str, dict]) -> list[str]:
    """Review entries that name no field of the pinned CRDs (a field upstream removed or renamed)."""
    return sorted(k for k in review if k not in fields and not k.startswith(("annotation:", "env:")))


def table(review: dict[str, dict], rules: dict[str, str], fields: set[str]) -> str:
    """The Markdown table: field, who may set it, the rule (or who else enforces it) and why, its test."""
    counts: dict[str, int] = {}
    for f in fields:
        ruling = covering(f, review)
        if ruling:
            counts[ruling] = counts.get(ruling, 0) + 1
    lines = ["| field | who may set it | rule | why | test |", "|---|---|---|---|---|"]
    for name in sorted(review):
        entry = review[name]
        kind = name.split(":")[0].split(" ")[0]
        who = WHO.get(kind, "team member (edit): a TrainJob's or a team runtime's")
        rule = str(entry["rule"])
        test = f"examples/policies/{rules[rule]}" if rule in rules else "-"
        shown = f"`{name}`" + (f" (+{counts[name] - 1} below)" if entry.get("subtree") and counts.get(name, 0) > 1 else "")
        why = str(entry.get("why", "")).replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {shown} | {who} | {rule if rule in ENFORCERS else f'`{rule}`'} | {why} | {test} |")
    return "\n".join(lines) + "\n"


def rule_files(root: Path | None = None) -> dict[str, str]:
    """rule key -> its policy file name (the examples have the same name)."""
    out = {}
    for path in sorted(paths.policies_dir(root).glob("*.yaml")):
        doc = yamlio.load(path.read_text())
        if isinstance(doc, dict) and doc.get("kind") == "ValidatingAdmissionPolicy":
            out[doc["metadata"]["annotations"]["trainstack.io/rule"]] = path.name
    return out


def pinned_fields() -> set[str]:
    from .. import lock as lockmod
    from . import crds

    found: set[str] = set()
    for _, crd in crds.pinned_crds(lockmod.load()):
        if crd.get("spec", {}).get("names", {}).get("kind") in ("TrainJob", "TrainingRuntime"):
            found |= fields_of(crd)
    return found


def render_doc(text: str, generated: str) -> str:
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{generated}{END}{tail}"


def main(argv: list[str]) -> int:
    root = paths.repo_root()
    review = load_review(root)
    fields = pinned_fields()
    missing = unreviewed(fields, review)
    doc = root / DOC_FILE
    wanted = render_doc(doc.read_text(), table(review, rule_files(root), fields))
    if argv[:1] == ["write"]:
        doc.write_text(wanted)
    elif doc.read_text() != wanted:
        print(f"{DOC_FILE} is out of date: run make generate", file=sys.stderr)
        return 1
    for name in missing:
        print(f"{REVIEW_FILE}: {name} is not reviewed: add it with the rule that governs it (or why none is needed)",
              file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
