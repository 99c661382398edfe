"""`trainstack bench validate`: trainstack validate against kubeconform on the same corpus.

A corpus of >= 10,000 documents (mixed built-in kinds and custom resources, about 5% invalid:
wrong types, unknown fields, CEL violations) is generated into a temp dir. Both tools validate
it in one run, each as its own process: trainstack with CEL on, kubeconform (pinned) with
-strict and the very same schemas exported in its JSON-schema layout. Wall time gives
documents per second; peak memory is the largest summed RSS of each process tree, sampled.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from .. import lock as lockmod
from .. import progress, tools
from ..errors import UserError

DOCUMENTS = 10_000
DOCS_PER_FILE = 50
INVALID_EVERY = 20  # one document in 20 is broken


# ----------------------------------------------------------------------------- corpus
def _meta(kind: str, i: int, namespaced: bool = True) -> dict:
    meta: dict[str, Any] = {"name": f"{kind.lower()}-{i}",
                            "labels": {"app.kubernetes.io/name": f"app-{i % 97}", "app.kubernetes.io/part-of": "bench",
                                       "trainstack.io/team": f"team-{i % 7}"},
                            "annotations": {"trainstack.io/owner": f"owner-{i % 13}@example.com"}}
    if namespaced:
        meta["namespace"] = f"team-{i % 7}"
    return meta


def _container(i: int, name: str = "main") -> dict:
    return {"name": name, "image": f"registry.example.com/app/{name}:1.{i % 10}.0",
            "args": ["--port=8080", f"--replica={i}", "--log-level=info"],
            "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
            "env": [{"name": f"VAR_{j}", "value": str(j * i)} for j in range(6)]
            + [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
            "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
            "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 10},
            "securityContext": {"runAsNonRoot": True, "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]}},
            "volumeMounts": [{"name": "data", "mountPath": "/data"}]}


def _pod_spec(i: int, restart: str = "Always") -> dict:
    return {"serviceAccountName": "runner", "restartPolicy": restart, "containers": [_container(i)],
            "volumes": [{"name": "data", "emptyDir": {}}], "nodeSelector": {"kubernetes.io/os": "linux"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}


def _deployment(i: int) -> dict:
    labels = {"app.kubernetes.io/name": f"app-{i % 97}"}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta("Deployment", i),
            "spec": {"replicas": 2, "selector": {"matchLabels": labels},
                     "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}},
                     "template": {"metadata": {"labels": labels}, "spec": _pod_spec(i)}}}


def _service(i: int) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": _meta("Service", i),
            "spec": {"selector": {"app.kubernetes.io/name": f"app-{i % 97}"},
                     "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}}


def _configmap(i: int) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta("ConfigMap", i),
            "data": {f"key{j}": f"value {j} of {i}" for j in range(8)}}


def _job(i: int) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": _meta("Job", i),
            "spec": {"backoffLimit": 3, "template": {"spec": _pod_spec(i, "Never")}}}


def _rolebinding(i: int) -> dict:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": _meta("RoleBinding", i),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
            "subjects": [{"kind": "ServiceAccount", "name": "runner", "namespace": f"team-{i % 7}"}]}


def _trainjob(i: int) -> dict:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": _meta("TrainJob", i),
            "spec": {"runtimeRef": {"name": "torch-distributed"},
                     "initializer": {"dataset": {"storageUri": f"hf://datasets/bench-{i}"}},
                     "trainer": {"numNodes": 1 + i % 4, "image": "pytorch/pytorch:2.5.0",
                                 "command": ["torchrun", "train.py"], "args": ["--epochs", "3"],
                                 "env": [{"name": "SEED", "value": str(i)}],
                                 "resourcesPerNode": {"limits": {"nvidia.com/gpu": 1, "cpu": "4", "memory": "16Gi"}}}}}


def _runtime(i: int) -> dict:
    job = {"name": "node", "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                                        "spec": {"template": {"spec": {"containers": [_container(i, "node")]}}}}}
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
            "metadata": _meta("TrainingRuntime", i),
            "spec": {"mlPolicy": {"numNodes": 1, "torch": {}},
                     "template": {"spec": {"replicatedJobs": [job]}}}}


def _jobset(i: int) -> dict:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": _meta("JobSet", i),
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": 2,
                                         "template": {"spec": {"parallelism": 2, "completions": 2,
                                                               "template": {"spec": _pod_spec(i, "Never")}}}}]}}


def _application(i: int) -> dict:
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": _meta("Application", i),
            "spec": {"project": "default",
                     "source": {"repoURL": "https://example.com/platform.git", "path": f"overlays/env-{i % 5}",
                                "targetRevision": "main"},
                     "destination": {"server": "https://kubernetes.default.svc", "namespace": "kubeflow-system"},
                     "syncPolicy": {"automated": {"prune": True, "selfHeal": True},
                                    "syncOptions": ["ServerSideApply=true"]}}}


MAKERS = [_deployment, _service, _configmap, _job, _rolebinding, _trainjob, _runtime, _jobset, _application,
          _deployment, _configmap, _trainjob]


def _break(doc: dict, i: int) -> dict:
    """One of the mistakes people make: a wrong type, an unknown field, a CEL violation."""
    how = i % 3
    if how == 0:
        doc["metadata"]["labels"] = {"app.kubernetes.io/name": 12}  # a number where a string goes
    elif how == 1:
        doc.setdefault("spec", {})["replica"] = 3  # a typo: unknown field
    elif doc["kind"] == "TrainJob":
        doc["spec"]["initializer"]["dataset"]["storageUri"] = "not a uri"  # CEL rule
    else:
        doc["metadata"]["name"] = f"Bad_Name_{i}"  # metadata format
    return doc


def generate(folder: Path, documents: int = DOCUMENTS, seed: int = 7) -> dict[str, int]:
    """Write the corpus; returns counts per kind and how many documents were broken on purpose."""
    rng = random.Random(seed)
    counts: dict[str, int] = {}
    broken = 0
    docs = []
    for i in range(documents):
        doc = rng.choice(MAKERS)(i)
        if i % INVALID_EVERY == INVALID_EVERY - 1:
            doc = _break(doc, i)
            broken += 1
        counts[doc["kind"]] = counts.get(doc["kind"], 0) + 1
        docs.append(doc)
    folder.mkdir(parents=True, exist_ok=True)
    for start in range(0, len(docs), DOCS_PER_FILE):
        chunk = docs[start:start + DOCS_PER_FILE]
        text = "".join("---\n" + yaml.dump(d, Dumper=yaml.CSafeDumper, sort_keys=False) for d in chunk)
        (folder / f"manifests-{start // DOCS_PER_FILE:04d}.yaml").write_text(text)
    return {"broken": broken, **counts}


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
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    peak = peak_pss = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak, peak_pss
        while not done.is_set():
            rss, pss = _tree_memory(proc.pid)
            peak, peak_pss = max(peak, rss), max(peak_pss, pss)
            done.wait(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    wall = time.perf_counter() - start
    done.set()
    sampler.join()
    return {"seconds": wall, "peak_rss_bytes": peak, "peak_pss_bytes": peak_pss, "exit_code": proc.returncode,
            "stdout": out, "stderr": err}


def _best(runs: list[dict]) -> dict:
    return min(runs, key=lambda r: r["seconds"])


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The `validate` bench part: returns the record bench.py writes to bench/results/validate.json."""
    from . import schemas

    documents = int(getattr(args, "documents", 0) or DOCUMENTS)
    repeats = max(1, int(getattr(args, "runs", 1) or 1))
    kubeconform = tools.require("kubeconform")
    catalog = schemas.load()
    work = Path(tempfile.mkdtemp(prefix="trainstack-bench-validate-"))
    try:
        corpus = work / "corpus"
        with progress.step(f"generating {documents} documents into {corpus}"):
            counts = generate(corpus, documents)
        keys = sorted({f"{d['apiVersion']}/{d['kind']}" for d in (m(0) for m in MAKERS)})
        location = export_schemas(catalog, keys, work / "schemas")
        ours_cmd = [sys.executable, "-m", "trainstack", "validate", str(corpus), "--output", "json"]
        theirs_cmd = [str(kubeconform), "-strict", "-summary", "-output", "json", "-schema-location", location,
                      str(corpus)]
        env = dict(os.environ, TRAINSTACK_ROOT=str(Path(__file__).resolve().parents[3]))
        measure(ours_cmd, env)  # warm: schema cache and OS page cache, for both
        measure(theirs_cmd)
        ours_runs, theirs_runs = [], []
        for _ in range(repeats):
            with progress.step("trainstack validate (CEL on, strict fields)"):
                ours_runs.append(measure(ours_cmd, env))
            with progress.step("kubeconform -strict (same schemas)"):
                theirs_runs.append(measure(theirs_cmd))
        ours, theirs = _best(ours_runs), _best(theirs_runs)
        if ours["exit_code"] not in (0, 1):
            raise UserError(f"trainstack validate failed in the benchmark: {ours['stderr'].strip()[-300:]}")
        if theirs["exit_code"] not in (0, 1):
            raise UserError(f"kubeconform failed in the benchmark: {theirs['stderr'].strip()[-300:]}")
        ours_summary = json.loads(ours["stdout"])["summary"]
        ours_invalid = len({(f["file"], f["document"]) for f in json.loads(ours["stdout"])["findings"]
                            if f["severity"] == "error"})
        theirs_summary = json.loads(theirs["stdout"]).get("summary", {})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ours_rate = documents / ours["seconds"]
    theirs_rate = documents / theirs["seconds"]
    ratio = ours_rate / theirs_rate
    return {
        "summary": f"{documents} docs: trainstack {ours_rate:,.0f}/s, kubeconform {theirs_rate:,.0f}/s, "
                   f"ratio {ratio:.2f}",
        "documents": documents,
        "trainstack_docs_per_s": round(ours_rate, 1),
        "kubeconform_docs_per_s": round(theirs_rate, 1),
        "ratio": round(ratio, 3),
        "trainstack_peak_rss_mb": round(ours["peak_rss_bytes"] / 2**20, 1),
        "kubeconform_peak_rss_mb": round(theirs["peak_rss_bytes"] / 2**20, 1),
        "trainstack_peak_pss_mb": round(ours["peak_pss_bytes"] / 2**20, 1),
        "kubeconform_peak_pss_mb": round(theirs["peak_pss_bytes"] / 2**20, 1),
        "trainstack_seconds": round(ours["seconds"], 3),
        "kubeconform_seconds": round(theirs["seconds"], 3),
        "runs": repeats,
        "corpus": {"files": (documents + DOCS_PER_FILE - 1) // DOCS_PER_FILE, "kinds": counts,
                   "broken_on_purpose": counts["broken"]},
        "trainstack": {"command": "trainstack validate CORPUS --output json", "summary": ours_summary,
                       "invalid_documents": ours_invalid, "cel": True},
        "kubeconform": {"version": lockmod.load().tool("kubeconform").version,
                        "command": "kubeconform -strict -summary -output json -schema-location EXPORTED CORPUS",
                        "summary": theirs_summary},
    }
