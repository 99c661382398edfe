"""`trainstack convert FILE... [--env ENV] [--out-dir DIR] [--runtime NAME] [--output text|json]`.

Reads v1 job manifests (files, folders, `-` for standard input), writes the TrainJobs as one YAML
stream on stdout (or one file each under --out-dir DIR) and reports, per object, every field that was
not carried over and why (stderr in text mode; with --output json, one JSON document on stdout).
A file that is not YAML, an object of a kind it does not know, or an object that has no golden
runtime is one error line naming the file and the object; then nothing is written.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from .. import progress, yamlio
from ..errors import UserError
from . import v1

KNOWN_V1_ELSEWHERE = {
    "TFJob": "TensorFlow has no runtime in Kubeflow Trainer v2",
    "MXJob": "MXNet has no runtime in Kubeflow Trainer v2",
}


def _files(args: list[str]) -> list[tuple[str, str]]:
    out = []
    for arg in args:
        if arg == "-":
            out.append(("<stdin>", sys.stdin.read()))
            continue
        path = Path(arg)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml", ".json") and p.is_file())
            if not found:
                raise UserError(f"{path}: no .yaml, .yml or .json files in this folder", exit_code=2)
            out += [(str(p), p.read_text()) for p in found]
        elif path.is_file():
            out.append((str(path), path.read_text()))
        else:
            raise UserError(f"{path}: no such file or folder", exit_code=2)
    return out


def _documents(source: str, text: str) -> list[tuple[int, dict[str, Any]]]:
    """(document number from 1, mapping) per document; `kind: List` is unpacked."""
    try:
        docs = list(yamlio.load_all(text))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = getattr(err, "problem", None) or "not valid YAML"
        raise UserError(f"{source}{where}: not valid YAML ({problem})") from None
    out = []
    for number, doc in enumerate(docs, 1):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise UserError(f"{source}: document {number} is not a mapping (a Kubernetes object)")
        if doc.get("kind") == "List" and isinstance(doc.get("items"), list):
            out += [(number, item) for item in doc["items"] if isinstance(item, dict)]
        else:
            out.append((number, doc))
    return out


def _label(doc: dict[str, Any], number: int) -> str:
    meta = found if isinstance(found := doc.get("metadata"), dict) else {}
    name = meta.get("name") or f"(document {number}, no name)"
    ns = meta.get("namespace")
    return f"{doc.get('kind') or '(no kind)'} {ns + '/' if ns else ''}{name}"


def convert_files(paths_: list[str], runtime: str = "", env: str = "dev",
                  runtimes: list[v1.Runtime] | None = None) -> list[v1.Result]:
    """Every object in `paths_` converted onto env's golden runtimes; a UserError at the first that cannot be."""
    results = []
    rendered: list[v1.Runtime] = []

    def platform() -> list[v1.Runtime]:  # rendered once, when the first object is known to be convertible
        if not rendered:
            rendered.extend(v1.load_runtimes(env))
            if not rendered:
                raise UserError(f"environment {env} installs no golden runtimes", "check its values.yaml")
        return rendered

    seen: dict[tuple[str, str], str] = {}
    for source, text in _files(paths_):
        for number, doc in _documents(source, text):
            label = _label(doc, number)
            api, kind = str(doc.get("apiVersion") or ""), doc.get("kind")
            if kind in KNOWN_V1_ELSEWHERE and api.startswith(v1.V1_GROUP + "/"):
                raise UserError(f"{source}: {label}: cannot convert: {KNOWN_V1_ELSEWHERE[kind]}")
            if kind not in v1.KINDS:
                raise UserError(f"{source}: {label}: not a Training Operator v1 job (kind must be one of "
                                f"{', '.join(v1.KINDS)})")
            if api != f"{v1.V1_GROUP}/v1":
                raise UserError(f"{source}: {label}: apiVersion is '{api}', expected {v1.V1_GROUP}/v1")
            result = v1.convert(doc, source, runtimes or platform, runtime_override=runtime)
            errors = [f for f in result.findings if f.severity == "error"]
            if errors:
                raise UserError(f"{source}: {label}: {errors[0].field}: {errors[0].reason}")
            key = (result.namespace, result.name)
            if key in seen:
                raise UserError(f"{source}: {label}: a TrainJob of this name is already converted from {seen[key]}")
            seen[key] = source
            results.append(result)
    return results


def _cmd(args: argparse.Namespace) -> int:
    results = convert_files(args.files, runtime=args.runtime or "", env=args.env)
    jobs = [r.trainjob for r in results if r.trainjob]
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        for job in jobs:
            ns = job["metadata"].get("namespace")
            (out / f"{ns + '_' if ns else ''}{job['metadata']['name']}.yaml").write_text(
                yaml.safe_dump(job, sort_keys=False))
    if args.output == "json":
        print(json.dumps({"objects": [r.as_dict() for r in results], **({} if args.out else {"trainjobs": jobs})},
                         indent=2))
    else:
        if not args.out:
            sys.stdout.write(yaml.safe_dump_all(jobs, sort_keys=False))
        for r in results:
            dropped = [f for f in r.findings if f.severity == "dropped"]
            changed = [f for f in r.findings if f.severity == "changed"]
            ns = f"{r.namespace}/" if r.namespace else ""
            progress.info(f"{r.source}: {r.kind} {ns}{r.name} -> TrainJob on {r.runtime}"
                          + (f"; {len(dropped)} field(s) not carried over" if dropped else "; every field carried over"))
            for f in changed:
                progress.info(f"  changed {f.field}: {f.reason}")
            for f in dropped:
                progress.info(f"  not carried over {f.field}: {f.reason}")
        if args.out:
            progress.info(f"wrote {len(jobs)} TrainJob(s) to {args.out}")
    return 0
