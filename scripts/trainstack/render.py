"""Renders an environment's manifests: the pinned kustomize over overlays/ENV, inflating the
umbrella chart with the pinned helm, then sorted into a deterministic order.

Each overlay's kustomization names the published chart (releases.yaml's chartRepository and the
chart's version); render builds it with this checkout's chart in that place, so `kustomize build
--enable-helm overlays/ENV` against the published chart (what Argo CD runs) and `trainstack render
--env ENV` give the same objects; render only orders them and writes them out.

Which values files make up an environment is read from one place, its kustomization's
`helmCharts` entry (`valuesFile`, then `additionalValuesFiles`): `values_files`, `value_args`
(helm `-f a -f b`) and `env_values` (the merged values) serve every command that installs or
reads an environment's values without kustomize.
"""

from __future__ import annotations

import re
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import yaml

from . import api, deps, helm, paths, tools, yamlio
from . import lock as lockmod
from .errors import UserError

MARKER = ".trainstack-render"
CHART_NAME = "trainstack"

# Install order: what others depend on first (as Helm and Argo CD order them).
KIND_ORDER = [
    "Namespace", "CustomResourceDefinition", "PriorityClass", "ServiceAccount", "Secret", "ConfigMap",
    "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Service", "Deployment",
    "PodDisruptionBudget", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
    "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "ClusterTrainingRuntime", "TrainingRuntime",
]


def environments() -> list[str]:
    root = paths.overlays_dir()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir()
                  if (p / "kustomization.yaml").is_file() and p.name not in ("base", "argocd"))


def overlay_dir(env: str) -> Path:
    known = environments()
    if env not in known:
        raise UserError(f"unknown environment '{env}'",
                        f"known environments: {', '.join(known) or 'none'} (folders under {paths.overlays_dir()})",
                        exit_code=2)
    return paths.overlays_dir() / env


def chart_entry(kustomization: Path, shown: str) -> tuple[int, dict[str, Any]]:
    """The index and body of the one `helmCharts` entry named trainstack in KUSTOMIZATION (SHOWN is its
    name in messages): an overlay inflates the umbrella chart once."""
    try:
        data = yamlio.load(kustomization.read_text()) or {}
    except yaml.YAMLError as exc:
        raise UserError(f"{shown}: not valid YAML: {str(exc).splitlines()[0]}", exit_code=2) from None
    entries = data.get("helmCharts") if isinstance(data, dict) else None
    found = [(i, c) for i, c in enumerate(entries if isinstance(entries, list) else [])
             if isinstance(c, dict) and c.get("name") == "trainstack"]
    if len(found) != 1:
        raise UserError(f"{shown}: helmCharts has {len(found)} entries named trainstack, want 1",
                        "an overlay inflates the umbrella chart once", exit_code=2)
    return found[0]


def values_files(env: str, root: Path | None = None) -> list[Path]:
    """The values files that make up ENV, in Helm's order (a later file wins): the overlay's
    helmCharts `valuesFile`, then its `additionalValuesFiles`, resolved relative to the overlay.
    `root` is another checkout (an older release's tree); by default this repository."""
    overlay = (root / "overlays" / env) if root is not None else overlay_dir(env)
    top = root if root is not None else paths.repo_root()
    kustomization = overlay / "kustomization.yaml"
    shown = _shown(kustomization, top)
    if not kustomization.is_file():
        raise UserError(f"{shown} not found", f"environment '{env}' needs an overlay folder", exit_code=2)
    index, chart = chart_entry(kustomization, shown)
    extra = chart.get("additionalValuesFiles") or []
    if not isinstance(extra, list):
        raise UserError(f"{shown}: helmCharts[{index}].additionalValuesFiles is not a list", exit_code=2)
    # kustomize reads the chart's own values.yaml when valuesFile is unset: no file to add then
    listed = [(f"helmCharts[{index}].valuesFile", chart["valuesFile"])] if chart.get("valuesFile") else []
    listed += [(f"helmCharts[{index}].additionalValuesFiles[{i}]", name) for i, name in enumerate(extra)]
    files = []
    for field, name in listed:
        path = (overlay / str(name)).resolve()
        if not path.is_relative_to(top.resolve()):
            raise UserError(f"{shown}: {field}: {name} is outside the repository",
                            "keep an environment's values files in the repository", exit_code=2)
        if root is None and not path.is_relative_to(overlay.resolve()):
            raise UserError(f"{shown}: {field}: {name} is outside the overlay's folder, which kustomize (and Argo "
                            f"CD's) refuses to read",
                            "list a file of overlays/shared/ by its name alone: make generate copies it into the folder",
                            exit_code=2)
        if not path.is_file():
            raise UserError(f"{shown}: {field}: {name} not found ({_shown(path, top)})",
                            "create the file or remove it from the list", exit_code=2)
        files.append(path)
    return files


def _shown(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def value_args(env: str, root: Path | None = None) -> list[str]:
    """helm's `-f FILE` arguments for ENV, in the kustomization's order."""
    return [arg for path in values_files(env, root) for arg in ("-f", str(path))]


def merge_values(base: dict, override: dict) -> dict:
    """Helm's merge of two values files: maps merge key by key, anything else is replaced, and a
    null in the later file removes the key."""
    out = dict(base)
    for key, value in override.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_values(out[key], value)
        else:
            out[key] = value
    return out


def env_values(env: str, root: Path | None = None) -> dict[str, Any]:
    """ENV's values as Helm sees them: its values files merged in order (the chart defaults not included)."""
    merged: dict[str, Any] = {}
    for path in values_files(env, root):
        try:
            data = yamlio.load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise UserError(f"{path}: not valid YAML: {str(exc).splitlines()[0]}", exit_code=2) from None
        if not isinstance(data, dict):
            raise UserError(f"{path}: a values file is a mapping, not {type(data).__name__}", exit_code=2)
        merged = merge_values(merged, data)
    return merged


def sort_key(doc: dict) -> tuple:
    kind = str(doc.get("kind", ""))
    meta = doc.get("metadata") or {}
    rank = KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER)
    return (rank, kind, str(doc.get("apiVersion", "")), str(meta.get("namespace", "")), str(meta.get("name", "")))


def published_chart(env: str) -> tuple[str, str]:
    """The (repo, version) of the published chart ENV's kustomization names; its version must be this
    checkout's chart's (make generate writes it), or render would show one chart under another's name."""
    kustomization = overlay_dir(env) / "kustomization.yaml"
    shown = _shown(kustomization, paths.repo_root())
    index, chart = chart_entry(kustomization, shown)
    repo, version = str(chart.get("repo") or ""), str(chart.get("version") or "")
    try:
        chart_version = str((yamlio.load((paths.chart_dir() / "Chart.yaml").read_text()) or {}).get("version"))
    except (OSError, yaml.YAMLError):
        raise UserError(f"{paths.chart_dir() / 'Chart.yaml'} is missing or not valid YAML") from None
    if not repo.startswith("oci://") or version != chart_version:
        raise UserError(f"{shown}: helmCharts[{index}] names {repo or 'no repo'} version {version or '(none)'}, "
                        f"not this checkout's chart {chart_version} in an OCI repository",
                        "run 'make generate' (it writes releases.yaml's chartRepository and version there)",
                        exit_code=2)
    return repo, version


def kustomize_build(env: str, lock: lockmod.Lock | None = None) -> str:
    """Raw `kustomize build --enable-helm` output for overlays/ENV, with the pinned helm. The
    kustomization names the published chart; the build runs on a scratch copy of overlays/ whose chart
    home holds this checkout's chart under that name and version, so kustomize inflates the chart
    being developed instead of pulling (the published archive is this chart, packaged reproducibly)."""
    lock = lock or lockmod.load()
    values_files(env)  # a missing or misplaced values file is one line naming the kustomization
    _, version = published_chart(env)
    deps.ensure(lock)
    helm_bin = tools.require("helm", lock)
    with tempfile.TemporaryDirectory(prefix="trainstack-render-") as tmp:
        overlays = Path(tmp) / "overlays"
        shutil.copytree(paths.overlays_dir(), overlays, ignore=shutil.ignore_patterns("charts", ".*"))
        home = overlays / env / "charts" / f"{CHART_NAME}-{version}"
        home.mkdir(parents=True)
        (home / CHART_NAME).symlink_to(paths.chart_dir().resolve(), target_is_directory=True)
        # Capabilities.KubeVersion of the lock's release (the chart's kubeVersion and version checks see it), not
        # the version helm was built with; TRAINSTACK_KUBERNETES renders for another tested release (make test-matrix)
        result = helm.run(["build", "--enable-helm", "--helm-command", str(helm_bin),
                           "--helm-kube-version", lock.kubernetes_version, str(overlays / env)],
                          lock=lock, binary="kustomize", check=False)
    if result.returncode != 0:
        refused = helm.chart_error(result.stderr)  # the chart refused the values: its line names the key
        if refused:
            raise UserError(f"overlays/{env}: {refused}", f"fix the values overlays/{env} sets")
        raise UserError(f"overlays/{env}: kustomize build failed: {helm.first_error_line(result.stderr)}",
                        "fix the overlay or the chart values it sets")
    return result.stdout


def render_objects(env: str, lock: lockmod.Lock | None = None) -> list[dict[str, Any]]:
    docs = [d for d in yamlio.load_all(kustomize_build(env, lock)) if isinstance(d, dict) and d]
    return sorted(docs, key=sort_key)


def rendered_crds(chart_dir: Path, value_args: list[str], namespace: str = api.NAMESPACE,
                  lock: lockmod.Lock | None = None) -> list[dict[str, Any]]:
    """The CRDs `helm install` of this chart with these values installs (its crds/ and those of the enabled
    dependencies): `helm template --include-crds`, CRDs only."""
    text = helm.run(helm.template_args(chart_dir, *value_args, namespace=namespace, include_crds=True),
                    lock=lock).stdout
    return [d for d in yamlio.load_all(text)
            if isinstance(d, dict) and d.get("kind") == "CustomResourceDefinition"]


def crd_documents(chart_dir: Path) -> list[dict[str, Any]]:
    """Every CRD a chart ships: its crds/ folder and the crds/ of each dependency archive in charts/."""
    docs: list[dict[str, Any]] = []
    for path in sorted((chart_dir / "crds").glob("*.yaml")):
        docs += [d for d in yamlio.load_all(path.read_text()) if isinstance(d, dict) and d]
    for archive in sorted((chart_dir / "charts").glob("*.tgz")):
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                parts = member.name.split("/")
                if member.isfile() and "crds" in parts[:-1] and member.name.endswith((".yaml", ".yml")):
                    handle = tar.extractfile(member)
                    if handle is None:  # a regular file always has its bytes; nothing to read otherwise
                        continue
                    text = handle.read().decode()
                    docs += [d for d in yamlio.load_all(text) if isinstance(d, dict) and d]
    return [d for d in docs if d.get("kind") == "CustomResourceDefinition"]


def to_stream(objects: list[dict]) -> str:
    return "".join("---\n" + yamlio.dump(o) for o in objects)


def file_name(obj: dict) -> str:
    meta = obj.get("metadata") or {}
    scope = meta.get("namespace") or "_cluster"
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", str(meta.get("name", "unnamed")))
    return f"{scope}/{obj.get('kind', 'Unknown')}-{name}.yaml"


def write_dir(objects: list[dict], out: Path) -> list[Path]:
    """One file per object under out; refuses a non-empty folder trainstack did not write."""
    if out.exists():
        if not out.is_dir():
            raise UserError(f"{out} exists and is not a folder", "choose another -o path", exit_code=2)
        if any(out.iterdir()) and not (out / MARKER).exists():
            raise UserError(f"{out} is not empty and was not written by trainstack render",
                            "choose an empty or new folder; nothing was changed", exit_code=2)
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / MARKER).write_text("written by trainstack render; the folder is replaced on the next render\n")
    written = []
    for obj in objects:
        path = out / file_name(obj)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            raise UserError(f"two rendered objects map to {path}")
        path.write_text(yamlio.dump(obj))
        written.append(path)
    return written
