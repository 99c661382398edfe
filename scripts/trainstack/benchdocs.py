"""The table of benchmark records in bench/results/README.md, written from the JSON records themselves.

Every `bench/results/*.json` that `make bench`, `make bench-e2e`, `make test-matrix` and the tests' timing
write carries its `part`, `date`, `machine` and (most) a one-line `summary`; `write()` renders one row per
record between the `<!-- BEGIN GENERATED: records -->` markers, so the page never states a figure the
records do not hold. The prose around the markers (what each figure means, older runs) is written by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

from . import paths
from .errors import UserError

RESULTS = "bench/results"
README = "bench/results/README.md"
BEGIN, END = "<!-- BEGIN GENERATED: records -->", "<!-- END GENERATED: records -->"


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _machine(record: dict) -> str:
    machine = record.get("machine") or {}
    cpus = machine.get("cpus")
    platform = str(machine.get("platform", "")).split("-with-")[0]
    return ", ".join(p for p in (f"{cpus} CPUs" if cpus else "", platform) if p) or "not recorded"


def _summary(record: dict) -> str:
    if record.get("summary"):
        return str(record["summary"])
    method = str(record.get("method", ""))  # a record without a summary says how it was taken
    return method.split(" (")[0] if method else "see the record"


def rows(root: Path | None = None) -> list[dict]:
    """One row per JSON record under bench/results, by file name."""
    folder = (root or paths.repo_root()) / RESULTS
    found = []
    for path in sorted(folder.glob("*.json")):
        try:
            record = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise UserError(f"{RESULTS}/{path.name}: not JSON ({err.msg}, line {err.lineno})") from None
        if not isinstance(record, dict):
            raise UserError(f"{RESULTS}/{path.name}: a record is a JSON object, not {type(record).__name__}")
        commit = str(record.get("commit") or "")
        found.append({"file": path.name, "part": str(record.get("part", "")),
                      "date": str(record.get("date", ""))[:10] or "not recorded",
                      "machine": _machine(record), "commit": commit[:10] or "not recorded",
                      "summary": _summary(record)})
    return found


def table(root: Path | None = None) -> str:
    lines = ["| record | part | date | machine | commit | summary |", "|---|---|---|---|---|---|"]
    lines += [f"| [{r['file']}]({r['file']}) | {_cell(r['part'])} | {r['date']} | {_cell(r['machine'])} | "
              f"{r['commit']} | {_cell(r['summary'])} |" for r in rows(root)]
    return "\n".join(lines)


def render(text: str, root: Path | None = None) -> str:
    if BEGIN not in text or END not in text:
        raise UserError(f"{README}: the markers {BEGIN} and {END} are missing",
                        "put them back where the table of records belongs")
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{table(root)}\n{END}{tail}"


def write(root: Path | None = None) -> bool:
    """Rewrite the table in bench/results/README.md; True when the file changed."""
    root = root or paths.repo_root()
    doc = root / README
    if not doc.exists():
        raise UserError(f"{README} is missing", "restore it from git: its prose is written by hand")
    text = doc.read_text()
    wanted = render(text, root)
    if wanted != text:
        doc.write_text(wanted)
        return True
    return False
