"""Shared by tests/chart/test_overlays.py and tests/{unit,chart}/test_argocd.py: each environment rendered once per
test session (through the real CLI), the pinned Argo CD sources, and CRD schemas as JSON Schemas.
"""

from __future__ import annotations

import functools
import json
import zipfile
from pathlib import Path
from typing import Any

from conftest import ROOT, docs_of, render_env
from trainstack import yamlio

ENVIRONMENTS = ["cpu-only", "dev", "prod", "staging"]
MIRROR = "mirror.example.com"

# Built-in kinds that are cluster-scoped (the renders' custom kinds get their scope from their CRDs).
CLUSTER_SCOPED_BUILTINS = {
    ("", "Namespace"), ("", "PersistentVolume"), ("", "Node"),
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("rbac.authorization.k8s.io", "ClusterRole"), ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"),
    ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding"),
    ("admissionregistration.k8s.io", "MutatingAdmissionPolicy"),
    ("admissionregistration.k8s.io", "MutatingAdmissionPolicyBinding"),
    ("scheduling.k8s.io", "PriorityClass"), ("storage.k8s.io", "StorageClass"),
    ("node.k8s.io", "RuntimeClass"), ("apiregistration.k8s.io", "APIService"),
}


@functools.cache
def rendered(env: str) -> tuple[dict, ...]:
    """`trainstack render --env ENV`, parsed (cached for the session: a render takes seconds)."""
    result = render_env(env)
    assert result.returncode == 0, result.stderr
    return tuple(docs_of(result.stdout))


@functools.cache
def published_archive() -> Path:
    """This checkout's chart as `trainstack chart package` writes it (what CI publishes), once a session."""
    import atexit
    import shutil
    import tempfile

    from trainstack import paths, publish

    out = Path(tempfile.mkdtemp(prefix="trainstack-published-"))
    atexit.register(shutil.rmtree, out, True)
    return publish.package(paths.chart_dir(), out)


def plain_kustomize(repo: Path, env: str, lock) -> list[dict]:
    """What Argo CD's own kustomize gives for REPO/overlays/ENV (a copy of this checkout, or part of one):
    the published chart where its `helm pull --untar` leaves it (charts/NAME-VERSION/ in the overlay),
    then the pinned `kustomize build --enable-helm` with the release's --helm-kube-version, as Argo CD
    passes the destination's. No --load-restrictor: every file the overlay reads is in its folder."""
    import subprocess
    import tarfile

    from trainstack import tools

    overlay = repo / "overlays" / env
    kustomization = yamlio.load((overlay / "kustomization.yaml").read_text())
    chart = next(c for c in kustomization["helmCharts"] if c["name"] == "trainstack")
    home = overlay / "charts" / f"trainstack-{chart['version']}"
    home.mkdir(parents=True, exist_ok=True)
    with tarfile.open(published_archive()) as tar:
        tar.extractall(home, filter="data")
    built = subprocess.run([str(tools.require("kustomize")), "build", "--enable-helm", "--helm-kube-version",
                            lock.kubernetes_version, "--helm-command", str(tools.require("helm")), str(overlay)],
                           capture_output=True, text=True, timeout=600, check=False)
    assert built.returncode == 0, built.stderr
    return docs_of(built.stdout)


def group_kind(obj: dict) -> tuple[str, str]:
    api = str(obj.get("apiVersion", ""))
    return (api.split("/")[0] if "/" in api else "", str(obj.get("kind", "")))


def cluster_scoped(env: str) -> set[tuple[str, str]]:
    """Cluster-scoped group/kinds: the built-in ones plus every CRD of scope Cluster in the render."""
    scoped = set(CLUSTER_SCOPED_BUILTINS)
    for doc in rendered(env):
        if doc["kind"] == "CustomResourceDefinition" and doc["spec"].get("scope") == "Cluster":
            scoped.add((doc["spec"]["group"], doc["spec"]["names"]["kind"]))
    return scoped


def canonical(docs) -> list[str]:
    """Order-independent, formatting-independent form of a list of objects."""
    return sorted(json.dumps(d, sort_keys=True) for d in docs)


# ----------------------------------------------------------------------------- Argo CD sources
@functools.cache
def argocd_zip() -> Path:
    """The pinned Argo CD module zip, verified against the lock's h1: sum."""
    from trainstack import chartpack, tools
    from trainstack import lock as lockmod

    source = lockmod.load(ROOT / "trainstack.lock.yaml").source("argocd")
    path = Path(tools.module_info(source.module, source.version)["Zip"])
    actual = chartpack.module_h1(path)
    assert actual == source.sum, f"{path}: h1 {actual} != lock {source.sum}"
    return path


def argocd_file(name: str) -> str:
    """A file from the pinned Argo CD module (name relative to the module root)."""
    from trainstack import lock as lockmod

    source = lockmod.load(ROOT / "trainstack.lock.yaml").source("argocd")
    with zipfile.ZipFile(argocd_zip()) as archive:
        return archive.read(f"{source.module}@{source.version}/{name}").decode()


@functools.cache
def argocd_crds() -> dict[str, dict]:
    """kind -> CRD, from manifests/crds/*.yaml of the pinned Argo CD."""
    from trainstack import lock as lockmod

    source = lockmod.load(ROOT / "trainstack.lock.yaml").source("argocd")
    prefix = f"{source.module}@{source.version}/manifests/crds/"
    found = {}
    with zipfile.ZipFile(argocd_zip()) as archive:
        for name in archive.namelist():
            if name.startswith(prefix) and name.endswith(".yaml"):
                for doc in yamlio.load_all(archive.read(name)):
                    if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                        found[doc["spec"]["names"]["kind"]] = doc
    assert {"Application", "ApplicationSet", "AppProject"} <= set(found), sorted(found)
    return found


@functools.cache
def argocd_validator(kind: str):
    return crd_validator(argocd_crds()[kind])


# ----------------------------------------------------------------------------- CRD schemas
_DROPPED = {"description", "format", "default", "example", "externalDocs", "nullable"}


def to_json_schema(node: Any) -> Any:
    """A CRD openAPIV3Schema as a JSON Schema (draft 4) that rejects what the API server rejects
    with strict field validation: unknown fields (unless preserve-unknown-fields), wrong types."""
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-") or key in _DROPPED:
            continue
        if key == "properties":
            out[key] = {name: to_json_schema(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "not") and isinstance(value, dict):
            out[key] = to_json_schema(value)
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [to_json_schema(sub) for sub in value]
        else:
            out[key] = value
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    if node.get("nullable") and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    if node.get("x-kubernetes-embedded-resource"):
        props = out.setdefault("properties", {})
        for field in ("apiVersion", "kind"):
            props.setdefault(field, {"type": "string"})
        props.setdefault("metadata", {"type": "object"})
    if (out.get("type") == "object" and "properties" in out and "additionalProperties" not in out
            and not node.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


def crd_validator(crd: dict, version: str | None = None):
    """A jsonschema validator for the served (or given) version of a CRD."""
    import jsonschema

    versions = crd["spec"]["versions"]
    chosen = next(v for v in versions if (v["name"] == version if version else v.get("storage")))
    schema = to_json_schema(chosen["schema"]["openAPIV3Schema"])
    return jsonschema.Draft4Validator(schema)


def schema_errors(validator, obj: dict) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path)) or '/'}: {e.message}"
            for e in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))]
