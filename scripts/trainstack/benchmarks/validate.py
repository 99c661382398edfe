"""`trainstack bench validate`: trainstack validate against two peers on the same corpus.

A corpus of 10,000 documents by default (`--docs N`; mixed built-in kinds and custom resources,
5% invalid: wrong types, unknown fields, CEL violations, bad names) is generated file by file
into a temp dir. Each tool validates it as its own process, `--runs` times after a warm-up:
trainstack with CEL on; kubeconform (pinned) with -strict and the very same schemas exported in
its JSON-schema layout (the fastest peer); kubectl-validate (pinned), which validates with the
API server's own code, offline, from the pinned Kubernetes OpenAPI v3 specs and the same CRDs
(the most faithful peer). Figures are medians of the runs: documents per second from wall time,
peak memory as the largest summed RSS and PSS of each process tree, sampled; each run records
the load average. Which documents each tool rejects is compared with the breaks put in.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from .. import lock as lockmod
from .. import proc, progress, tools
from ..errors import UserError
from ..jsontypes import dig
from ..validate import builtin, crds, schemas
from .validate_corpus import BREAKS, DOCS_PER_FILE, DOCUMENTS, MAKERS, generate

PEERS = ("kubeconform", "kubectl_validate")


def export_schemas(catalog, keys: list[str], folder: Path) -> str:
    """The same schemas validate uses, in kubeconform's {{.Group}}/{{.ResourceKind}}_{{.ResourceAPIVersion}} layout."""
    for key in keys:
        info = catalog.kinds[key]
        group = info.apiVersion.split("/")[0]
        path = folder / group / f"{info.kind.lower()}_{info.version}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(catalog.json_schema(key)))
    return str(folder) + "/{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json"


# ----------------------------------------------------------------------------- measuring
def _tree_memory(pid: int) -> tuple[int, int]:
    """(RSS, PSS) in bytes, summed over pid and all its descendants.

    RSS counts pages a forked worker shares with its parent once per process; PSS splits them,
    so it is the fairer total for a process tree."""
    rss = pss = 0
    todo = [pid]
    while todo:
        current = todo.pop()
        try:
            with open(f"/proc/{current}/smaps_rollup") as rollup:
                for line in rollup:
                    if line.startswith("Rss:"):
                        rss += int(line.split()[1]) * 1024
                    elif line.startswith("Pss:"):
                        pss += int(line.split()[1]) * 1024
                        break
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as children:
                    todo.extend(int(c) for c in children.read().split())
        except (OSError, ValueError):
            continue
    return rss, pss


def measure(cmd: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run cmd once: wall seconds, peak summed RSS, exit code, stdout."""
    start = time.perf_counter()
    process = proc.start(cmd, stdout=proc.PIPE, stderr=proc.PIPE, text=True, env=env)
    peak = peak_pss = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak, peak_pss
        while not done.is_set():
            rss, pss = _tree_memory(process.pid)
            peak, peak_pss = max(peak, rss), max(peak_pss, pss)
            done.wait(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = process.communicate()
    wall = time.perf_counter() - start
    done.set()
    sampler.join()
    return {"seconds": wall, "peak_rss_bytes": peak, "peak_pss_bytes": peak_pss, "exit_code": process.returncode,
            "stdout": out, "stderr": err}


def export_kubectl_validate(lock, catalog, keys: list[str], folder: Path) -> tuple[Path, Path, str]:
    """kubectl-validate's offline inputs from the same sources validate reads: (CRD folder,
    local-schemas folder, --version). Built-ins: the pinned k8s.io/kubernetes module's OpenAPI v3
    spec files in its /api/<version>.json, /apis/<group>/<version>.json layout; CRDs: the pinned
    CRDs that define the corpus's custom kinds."""
    version = lock.kubernetes_version
    info = tools.module_info(schemas.K8S_MODULE, version)
    specs = builtin.read_specs(Path(info["Zip"]), f"{schemas.K8S_MODULE}@{version}")
    schema_dir = folder / "schemas"
    for name, spec in specs.items():  # apis__apps__v1_openapi.json -> apis/apps/v1.json
        parts = name[: -len("_openapi.json")].split("__")
        if len(parts) != {"api": 2, "apis": 3}.get(parts[0]):
            continue  # group discovery and .well-known documents
        path = schema_dir.joinpath(*parts[:-1], parts[-1] + ".json")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(spec))
    wanted = {(catalog.kinds[k].apiVersion.split("/")[0], catalog.kinds[k].kind) for k in keys
              if not catalog.kinds[k].builtin}
    crd_dir = folder / "crds"
    crd_dir.mkdir(parents=True, exist_ok=True)
    written = 0
    for _origin, crd in crds.pinned_crds(lock):
        spec = crd.get("spec") or {}
        if (spec.get("group"), dig(spec, "names", "kind")) in wanted:
            written += 1
            (crd_dir / f"{written:03d}-{spec['names']['kind'].lower()}.yaml").write_text(
                yaml.dump(crd, Dumper=yaml.CSafeDumper, sort_keys=False))
    if written < len(wanted):
        raise UserError(f"kubectl-validate export: {len(wanted)} custom kinds in the corpus, {written} pinned CRDs "
                        "define them", "run 'trainstack deps'")
    return crd_dir, schema_dir, _kubectl_validate_fallback(lock)


def _kubectl_validate_fallback(lock) -> str:
    """The --version kubectl-validate needs: it refuses to start unless its fallback for built-ins
    (schemas embedded per Kubernetes minor, else a download) loads, and v0.0.4 embeds up to 1.30.
    The newest embedded minor, read from the pinned module: --local-schemas (the pinned 1.36 specs)
    come first in its composite, so the fallback only fills group-versions 1.36 lacks."""
    tool = lock.tool("kubectl-validate")
    builtins = Path(tools.module_info(tool.module, tool.version)["Dir"]) / "pkg" / "openapiclient" / "builtins"
    minors = [p.name for p in builtins.iterdir() if p.is_dir() and p.name.replace(".", "").isdigit()]
    if not minors:
        raise UserError(f"{tool.module}@{tool.version}: no embedded built-in schemas under {builtins}")
    return max(minors, key=lambda m: tuple(int(x) for x in m.split(".")))


# ----------------------------------------------------------------------------- who says what is invalid
def _ours_invalid(stdout: str) -> tuple[dict, set[tuple[str, int]]]:
    body = json.loads(stdout)
    return body["summary"], {(Path(f["file"]).name, f["document"]) for f in body["findings"]
                             if f["severity"] == "error"}


def _kubeconform_invalid(stdout: str, names: dict[tuple[str, str, str], int]) -> tuple[dict, set[tuple[str, int]]]:
    """kubeconform reports (file, kind, name) per resource: mapped back to document indexes."""
    body = json.loads(stdout)
    bad = set()
    for res in body.get("resources") or []:
        if res.get("status") in ("statusInvalid", "statusError"):
            file = Path(res.get("filename", "")).name
            index = names.get((file, res.get("kind", ""), res.get("name", "")))
            bad.add((file, index if index is not None else -1))
    return body.get("summary", {}), bad


def _kubectl_validate_invalid(stdout: str, per_file: dict[str, int]) -> tuple[dict, set[tuple[str, int]]]:
    """kubectl-validate -o json: {file: [Status per YAML document]}; a leading `---` gives an empty first one."""
    body = json.loads(stdout) if stdout.strip() else {}
    bad = set()
    for path, statuses in body.items():
        file = Path(path).name
        skip = 1 if len(statuses) == per_file.get(file, 0) + 1 else 0
        for i, status in enumerate(statuses[skip:]):
            if (status or {}).get("status") == "Failure":
                bad.add((file, i))
    counts = {"documents": sum(len(v) for v in body.values()), "invalid": len(bad)}
    return counts, bad


def _agreement(found: dict[str, set], index: list[tuple[str, int, str, str]]) -> dict[str, Any]:
    """Per tool: which of the documents broken on purpose it caught (by kind of break), and what else it flagged."""
    broken = {(f, i): how for f, i, _, how in index if how}
    out: dict[str, Any] = {}
    for tool, bad in found.items():
        caught = {how: 0 for how in BREAKS}
        missed = {how: 0 for how in BREAKS}
        for key, how in broken.items():
            (caught if key in bad else missed)[how] += 1
        out[tool] = {"invalid_documents": len(bad), "caught": caught, "missed": missed,
                     "flagged_not_broken": len(bad - broken.keys())}
    tools_ = list(found)
    out["all_agree_documents"] = sum(1 for key in broken if all(key in found[t] for t in tools_))
    out["broken_on_purpose"] = len(broken)
    return out


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _timed(label: str, cmd: list[str], warm: list[str], env: dict[str, str] | None, repeats: int) -> list[dict]:
    measure(warm, env)  # warm-up on a small corpus: the schema cache and the OS page cache
    runs = []
    for n in range(repeats):
        with progress.step(f"{label} (run {n + 1}/{repeats})"):
            before = _load()
            result = measure(cmd, env)
            result["load_before"], result["load_after"] = before, _load()
        if result["exit_code"] not in (0, 1):
            raise UserError(f"{label} failed in the benchmark (exit {result['exit_code']}): "
                            f"{result['stderr'].strip()[-300:]}")
        runs.append(result)
    return runs


def _section(runs: list[dict], documents: int) -> dict[str, Any]:
    """Medians over the runs, and every run (seconds, memory, load average: 1, 5, 15 min)."""
    return {
        "docs_per_s": round(documents / _median([r["seconds"] for r in runs]), 1),
        "seconds": round(_median([r["seconds"] for r in runs]), 3),
        "peak_rss_mb": round(_median([r["peak_rss_bytes"] for r in runs]) / 2**20, 1),
        "peak_pss_mb": round(_median([r["peak_pss_bytes"] for r in runs]) / 2**20, 1),
        "runs": [{"seconds": round(r["seconds"], 3), "peak_rss_mb": round(r["peak_rss_bytes"] / 2**20, 1),
                  "peak_pss_mb": round(r["peak_pss_bytes"] / 2**20, 1), "exit_code": r["exit_code"],
                  "load_before": r["load_before"], "load_after": r["load_after"]} for r in runs],
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The `validate` bench part: returns the record bench.py writes to bench/results/validate.json.

    Every tool runs `--runs` times (after one warm-up run); figures are the MEDIAN of those runs."""
    documents = int(getattr(args, "documents", 0) or DOCUMENTS)
    repeats = max(1, int(getattr(args, "runs", 1) or 1))
    lock = lockmod.load()
    kubeconform = tools.require("kubeconform", lock)
    peers = [p.strip().replace("-", "_") for p in (getattr(args, "peers", None) or ",".join(PEERS)).split(",")]
    unknown = [p for p in peers if p not in PEERS]
    if unknown or not peers:
        raise UserError(f"--peers {getattr(args, 'peers', '')}: unknown peer(s) {', '.join(unknown) or '(none)'}",
                        f"known: {', '.join(p.replace('_', '-') for p in PEERS)}", exit_code=2)
    kubectl_validate = tools.require("kubectl-validate", lock) if "kubectl_validate" in peers else None
    catalog = schemas.load()
    work = Path(tempfile.mkdtemp(prefix="trainstack-bench-validate-"))
    index: list[tuple[str, int, str, str]] = []
    try:
        corpus = work / "corpus"
        with progress.step(f"generating {documents} documents into {corpus}"):
            counts = generate(corpus, documents, index=index)
            generate(work / "warm", min(documents, 200))
        keys = sorted({f"{d['apiVersion']}/{d['kind']}" for d in (m(0) for m in MAKERS)})
        location = export_schemas(catalog, keys, work / "schemas")
        crd_dir, schema_dir, kube_minor = (export_kubectl_validate(lock, catalog, keys, work / "kubectl-validate")
                                           if kubectl_validate else (None, None, ""))
        commands = {
            "trainstack": [sys.executable, "-m", "trainstack", "validate", str(corpus), "--output", "json"],
            "kubeconform": [str(kubeconform), "-strict", "-summary", "-output", "json", "-schema-location", location,
                            str(corpus)],
            "kubectl_validate": [str(kubectl_validate), "--version", kube_minor, "--local-crds", str(crd_dir),
                                 "--local-schemas", str(schema_dir), "--output", "json", str(corpus)],
        }
        # kubeconform always runs: the top-level keys (ratio, kubeconform_*) are its figures
        commands = {tool: cmd for tool, cmd in commands.items() if tool in ("trainstack", "kubeconform") or tool in peers}
        env = dict(os.environ, TRAINSTACK_ROOT=str(Path(__file__).resolve().parents[3]))
        labels = {"trainstack": "trainstack validate (CEL on, strict fields)",
                  "kubeconform": "kubeconform -strict (same schemas)",
                  "kubectl_validate": "kubectl-validate (the API server's validation code)"}
        runs = {tool: _timed(labels[tool], cmd, cmd[:-1] + [str(work / "warm")], env, repeats)
                for tool, cmd in commands.items()}
        names = {(f, kind, f"{kind.lower()}-{n}"): i
                 for n, (f, i, kind, _how) in enumerate(index)}
        names.update({(f, kind, f"Bad_Name_{n}"): i for n, (f, i, kind, how) in enumerate(index)
                      if how == "name-format"})
        per_file: dict[str, int] = {}
        for f, _i, _k, _h in index:
            per_file[f] = per_file.get(f, 0) + 1
        last = {tool: r[-1]["stdout"] for tool, r in runs.items()}
        ours_summary, ours_bad = _ours_invalid(last["trainstack"])
        theirs_summary, theirs_bad = _kubeconform_invalid(last["kubeconform"], names)
        found = {"trainstack": ours_bad, "kubeconform": theirs_bad}
        if "kubectl_validate" in runs:
            kv_summary, kv_bad = _kubectl_validate_invalid(last["kubectl_validate"], per_file)
            found["kubectl_validate"] = kv_bad
    finally:
        shutil.rmtree(work, ignore_errors=True)
    sections = {tool: _section(r, documents) for tool, r in runs.items()}
    ours = sections["trainstack"]
    ratios = {tool: round(ours["docs_per_s"] / sections[tool]["docs_per_s"], 3) for tool in sections
              if tool != "trainstack"}
    ratio = ratios["kubeconform"]
    peers_text = ", ".join(f"{tool.replace('_', '-')} {sections[tool]['docs_per_s']:,.0f}/s (ratio {ratios[tool]:.2f})"
                           for tool in ratios)
    record: dict[str, Any] = {
        "summary": f"{documents} docs, median of {repeats}: trainstack {ours['docs_per_s']:,.0f}/s, {peers_text}",
        "documents": documents,
        "statistic": "median",
        "load_average": _load(),
        "trainstack_docs_per_s": ours["docs_per_s"],
        "kubeconform_docs_per_s": sections["kubeconform"]["docs_per_s"],
        "ratio": ratio,
        "ratios": ratios,
        "trainstack_peak_rss_mb": ours["peak_rss_mb"],
        "kubeconform_peak_rss_mb": sections["kubeconform"]["peak_rss_mb"],
        "trainstack_peak_pss_mb": ours["peak_pss_mb"],
        "kubeconform_peak_pss_mb": sections["kubeconform"]["peak_pss_mb"],
        "trainstack_seconds": ours["seconds"],
        "kubeconform_seconds": sections["kubeconform"]["seconds"],
        "runs": repeats,
        "corpus": {"files": (documents + DOCS_PER_FILE - 1) // DOCS_PER_FILE, "kinds": counts,
                   "broken_on_purpose": counts["broken"]},
        "agreement": _agreement(found, index),
        "trainstack": {"command": "trainstack validate CORPUS --output json", "summary": ours_summary,
                       "invalid_documents": len(ours_bad), "cel": True, **ours},
        "kubeconform": {"version": lock.tool("kubeconform").version,
                        "command": "kubeconform -strict -summary -output json -schema-location EXPORTED CORPUS",
                        "summary": theirs_summary, "invalid_documents": len(theirs_bad), **sections["kubeconform"]},
    }
    if "kubectl_validate" in sections:
        record["kubectl_validate_docs_per_s"] = sections["kubectl_validate"]["docs_per_s"]
        record["kubectl_validate"] = {
            "version": lock.tool("kubectl-validate").version,
            "command": f"kubectl-validate --version {kube_minor} --local-crds CRDS --local-schemas OPENAPI_V3 "
                       "--output json CORPUS",
            "builtins": f"Kubernetes {lock.kubernetes_version} OpenAPI v3 (--local-schemas); "
                        f"--version {kube_minor} is only its fallback for absent group-versions",
            "summary": kv_summary, "invalid_documents": len(kv_bad), **sections["kubectl_validate"]}
    return record
