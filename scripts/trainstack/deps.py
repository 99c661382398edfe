"""Makes the umbrella chart's dependencies available in charts/trainstack/charts/.

First choice: the published charts from their OCI repositories (`helm dependency build`).
When those cannot be reached: the same chart versions built from upstream source at the
pinned tag, taken from the Go module proxy and verified against the lock's h1: checksum,
with the edits upstream's release scripts make when they publish (image and version fields).
Then the upstream CRDs are written to charts/trainstack/crds/, where Helm installs them but
never deletes them, so TrainJobs survive `helm uninstall`. Nothing here is committed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from . import chartpack, helm, paths, proc, progress, tools, yamlio
from . import lock as lockmod
from .errors import UserError, output_line

REPORT = ".trainstack-deps.json"
OCI_TIMEOUT_S = 120


@dataclass
class DepsResult:
    source: str  # "oci" | "source"
    charts: dict[str, str]  # name -> archive path
    crds: list[str]
    oci_error: str = ""
    skipped: bool = False


def chart_dependencies(chart_dir: Path) -> list[dict]:
    chart_yaml = chart_dir / "Chart.yaml"
    try:
        data = yamlio.load(chart_yaml.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise UserError(f"{chart_yaml}: cannot read the chart: {err}".splitlines()[0]) from None
    if not isinstance(data, dict):
        raise UserError(f"{chart_yaml}: not a YAML mapping", "restore Chart.yaml from git")
    deps = data.get("dependencies") or []
    if not isinstance(deps, list):
        raise UserError(f"{chart_yaml}: 'dependencies' must be a list")
    return deps


def check_against_lock(chart_dir: Path, lock: lockmod.Lock) -> list[dict]:
    """Chart.yaml's dependencies, after checking each matches the lock (name, version, OCI repo)."""
    deps = chart_dependencies(chart_dir)
    names = {d.get("name") for d in deps}
    for pin in lock.charts():
        if pin.name not in names:
            raise UserError(f"{chart_dir / 'Chart.yaml'}: dependency '{pin.name}' from the lock is missing")
    for dep in deps:
        pin = lock.chart(str(dep.get("name")))
        if str(dep.get("version")) != pin.version or dep.get("repository") != pin.oci:
            raise UserError(
                f"{chart_dir / 'Chart.yaml'}: dependency '{pin.name}' is {dep.get('version')} from "
                f"{dep.get('repository')}, but the lock pins {pin.version} from {pin.oci}",
                "edit Chart.yaml to match trainstack.lock.yaml, then run 'trainstack deps lock'",
            )
    return deps


def write_chart_lock(chart_dir: Path, lock: lockmod.Lock) -> Path:
    """(Re)write Chart.lock with Helm's digest, offline (no repository is contacted)."""
    deps = check_against_lock(chart_dir, lock)
    locked = [{"name": d["name"], "repository": d["repository"], "version": str(d["version"])} for d in deps]
    digest = chartpack.helm_lock_digest(deps, locked)
    body = {"dependencies": locked, "digest": digest, "generated": "2026-01-01T00:00:00Z"}
    path = chart_dir / "Chart.lock"
    path.write_text(yaml.safe_dump(body, sort_keys=True))
    return path


def verify_chart_lock(chart_dir: Path, lock: lockmod.Lock) -> None:
    deps = check_against_lock(chart_dir, lock)
    path = chart_dir / "Chart.lock"
    try:
        data = yamlio.load(path.read_text())
    except (OSError, yaml.YAMLError):
        raise UserError(f"{path} is missing or unreadable", "run 'trainstack deps lock'") from None
    if chartpack.helm_lock_digest(deps, data.get("dependencies") or []) != data.get("digest"):
        raise UserError(f"{path} is out of date with Chart.yaml", "run 'trainstack deps lock'")


# -- sources --------------------------------------------------------------------------------

def _try_oci(chart_dir: Path, lock: lockmod.Lock, out_dir: Path) -> str:
    """`helm dependency build` in a scratch copy of Chart.yaml and Chart.lock, the archives left in
    OUT_DIR; returns '' on success or the reason it failed."""
    scratch = out_dir.parent / "chart"
    (scratch / "charts").mkdir(parents=True)
    for name in ("Chart.yaml", "Chart.lock"):
        shutil.copyfile(chart_dir / name, scratch / name)
    try:
        result = helm.run(["dependency", "build", str(scratch), "--skip-refresh"], lock=lock,
                          timeout=OCI_TIMEOUT_S, check=False)
    except proc.CommandError as err:  # ran past OCI_TIMEOUT_S, or could not start
        return f"no answer within {OCI_TIMEOUT_S}s" if "timed out" in err.message else err.message
    if result.returncode != 0:
        return output_line(result.stderr or result.stdout, markers=(), empty=f"helm exited {result.returncode}")
    out_dir.mkdir(parents=True, exist_ok=True)
    for archive in (scratch / "charts").glob("*.tgz"):
        archive.rename(out_dir / archive.name)
    return ""


def _verified_zip(source: lockmod.ModuleSource) -> Path:
    info = tools.module_info(source.module, source.version)
    zip_path = Path(info["Zip"])
    actual = chartpack.module_h1(zip_path)
    if actual != source.sum:
        raise UserError(f"checksum mismatch for {source.module}@{source.version}: lock says {source.sum}, "
                        f"the module zip hashes to {actual}", "do not use this module; check the lock file")
    return zip_path


def _set_yaml_scalar(path: Path, dotted: str, value: str) -> None:
    """Set one scalar in a YAML file in place, keeping comments (what upstream's yq edits do)."""
    lines = path.read_text().splitlines(keepends=True)
    keys = dotted.split(".")
    depth, indent_stack = 0, [-1]
    for i, line in enumerate(lines):
        stripped = line.lstrip(" ")
        if not stripped.strip() or stripped.startswith("#"):
            continue
        indent = len(line) - len(stripped)
        while depth > 0 and indent <= indent_stack[-1]:
            depth -= 1
            indent_stack.pop()
        match = re.match(rf"{re.escape(keys[depth])}:(\s|$)", stripped)
        if not match:
            continue
        if depth == len(keys) - 1:
            lines[i] = f"{' ' * indent}{keys[depth]}: {json.dumps(value)}\n"
            path.write_text("".join(lines))
            parsed = yamlio.load(path.read_text())
            for key in keys:
                parsed = parsed[key]
            if parsed != value:
                raise UserError(f"{path}: could not set {dotted}")
            return
        depth += 1
        indent_stack.append(indent)
    raise UserError(f"{path}: upstream chart has no '{dotted}' value to set", "the lock may point at an "
                    "upstream version whose chart layout differs; check charts in trainstack.lock.yaml")


# chart -> (lock image, values key of its image block): what upstream's publishing scripts
# (hack/helm-chart-package.sh, hack/push-chart.sh) rewrite in values.yaml when they release.
RELEASE_IMAGES = {"jobset": ("jobset-controller", "image"), "lws": ("lws-controller", "image.manager"),
                  "kueue": ("kueue-controller", "controllerManager.manager.image")}


def _release_edits(name: str, workdir: Path, lock: lockmod.Lock) -> None:
    """The edits upstream's publishing scripts make: released image, IfNotPresent, chart version."""
    pin = lock.chart(name)
    chart_yaml = workdir / "Chart.yaml"
    meta = yamlio.load(chart_yaml.read_text())
    if name in RELEASE_IMAGES:
        image_name, key = RELEASE_IMAGES[name]
        image = lock.image(image_name)
        values = workdir / "values.yaml"
        _set_yaml_scalar(values, f"{key}.repository", f"{image.registry}/{image.repository}")
        _set_yaml_scalar(values, f"{key}.tag", image.tag)
        _set_yaml_scalar(values, f"{key}.pullPolicy", "IfNotPresent")
        meta["appVersion"] = image.tag
    if str(meta.get("version")) != pin.version:
        meta["version"] = pin.version  # the lws tag carries `version: 0.1.0`
    chart_yaml.write_text(yaml.safe_dump(meta, sort_keys=False))


def _build_from_source(chart_dir: Path, lock: lockmod.Lock, out_dir: Path) -> dict[str, str]:
    built: dict[str, Path] = {}
    with tempfile.TemporaryDirectory(prefix="trainstack-deps-") as tmp:
        order = sorted(lock.charts(), key=lambda p: p.name == "kubeflow-trainer")  # nested deps first
        for pin in order:
            with progress.step(f"building chart {pin.name} {pin.version} from {pin.source.module}@{pin.source.version}"):
                zip_path = _verified_zip(pin.source)
                work = Path(tmp) / pin.name
                prefix = f"{pin.source.module}@{pin.source.version}/{pin.source.path}"
                chartpack.extract_subdir(zip_path, prefix, work)
                if not (work / "Chart.yaml").is_file():
                    raise UserError(f"{pin.source.module}@{pin.source.version} has no chart at {pin.source.path}")
                _release_edits(pin.name, work, lock)
                for nested in chart_dependencies(work):
                    nested_name, nested_version = nested.get("name"), str(nested.get("version"))
                    if nested_name not in built or lock.chart(nested_name).version != nested_version:
                        raise UserError(f"{pin.name} {pin.version} needs {nested_name} {nested_version}, "
                                        "which the lock does not pin", "pin it under charts in the lock")
                    (work / "charts").mkdir(exist_ok=True)
                    shutil.copy2(built[nested_name], work / "charts" / built[nested_name].name)
                archive = Path(tmp) / f"{pin.name}-{pin.version}.tgz"
                chartpack.pack_chart(work, pin.name, archive)
                built[pin.name] = archive
        out_dir.mkdir(parents=True, exist_ok=True)
        result = {}
        for name, archive in built.items():
            dest = out_dir / archive.name
            shutil.copyfile(archive, dest)
            result[name] = str(dest)
    return result


def fetch_sources(lock: lockmod.Lock) -> dict[str, str]:
    """Fetch and verify every other upstream source in the lock (Argo CD CRDs, KWOK stages) now,
    so nothing later (tests, validate, e2e) downloads; returns name -> verified module zip."""
    found = {}
    for name in lock.get("sources"):
        source = lock.source(name)
        with progress.step(f"fetching {source.module}@{source.version} (verified against the lock)"):
            found[name] = str(_verified_zip(source))
    return found


def _install(staged: Path, target: Path, managed) -> None:
    """Move STAGED's files into TARGET one os.replace at a time, then remove TARGET's other files that
    MANAGED(path) says are ours. A `helm template` reading TARGET meanwhile finds the old file or the
    new one, never none and never half of one (emptying the folder first failed renders running
    beside a rebuild: "missing in charts/ directory")."""
    target.mkdir(parents=True, exist_ok=True)
    names = {item.name for item in staged.iterdir()}
    for name in sorted(names, key=lambda n: n == REPORT):  # the report last: it says the rest is there
        os.replace(staged / name, target / name)
    for child in target.iterdir():
        if child.is_file() and child.name not in names and managed(child):
            child.unlink()


def _ours_in_charts(path: Path) -> bool:
    return path.suffix == ".tgz" or path.name == REPORT


@contextlib.contextmanager
def _staging(chart_dir: Path):
    """A scratch folder beside the chart (same file system, so its files move in with a rename; not
    inside it, where Helm would read it as part of the chart)."""
    with tempfile.TemporaryDirectory(prefix=".trainstack-deps-", dir=chart_dir.parent) as tmp:
        yield Path(tmp)


def _exclusive(chart_dir: Path) -> contextlib.AbstractContextManager[None]:
    """One build of CHART_DIR's dependencies at a time, across processes: the lock is named by the chart's path."""
    return paths.exclusive(f"deps-{hashlib.sha256(str(chart_dir.resolve()).encode()).hexdigest()[:16]}")


# How crds/ is written (part of the dependencies' fingerprint: a new form rebuilds them). Compact JSON (valid
# YAML): Helm keeps every chart file in the release's Secret, which may hold 1 MiB; the three Trainer CRDs
# dumped as indented YAML (3.5 MB, deep nesting) took about 0.6 MB of it, as JSON without indentation
# (0.9 MB) about 0.4 MB. An install with teams and Kueue crossed the limit with the YAML.
CRD_FORM = "json-compact"


def _write_crds(archive: Path, lock: lockmod.Lock, crd_dir: Path) -> list[str]:
    """Render the Trainer chart's CRD templates (upstream ships them as templates) into CRD_DIR, one compact
    JSON document (valid YAML) per CRD."""
    rendered = helm.run(helm.template_args(archive, "--set", "crds.enabled=true", "--set", "jobset.install=false",
                                           "--set", "dataCache.enabled=false", release="crds", namespace="default"),
                        lock=lock).stdout
    crd_dir.mkdir(parents=True, exist_ok=True)
    names = []
    for doc in yamlio.load_all(rendered):
        if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
            name = doc["metadata"]["name"]
            (crd_dir / f"{name}.yaml").write_text(
                f"# {name}: generated by `trainstack deps` from the pinned Trainer chart (compact JSON, valid YAML)\n"
                + json.dumps(doc, sort_keys=True, separators=(",", ":")) + "\n")
            names.append(name)
    if not names:
        raise UserError(f"{archive}: rendered no CustomResourceDefinitions", "the Trainer chart layout changed")
    (crd_dir / "README.md").write_text("Generated by `trainstack deps` from the pinned Trainer chart. Not in git.\n")
    return sorted(names)


def fingerprint(chart_dir: Path, lock: lockmod.Lock) -> str:
    """What the dependencies are built from: the lock's charts, images and sources, Chart.yaml, Chart.lock."""
    pinned = {k: lock.data.get(k) for k in ("charts", "images", "sources")}
    text = (json.dumps(pinned, sort_keys=True) + (chart_dir / "Chart.yaml").read_text()
            + (chart_dir / "Chart.lock").read_text() + CRD_FORM)
    return hashlib.sha256(text.encode()).hexdigest()


def _whole_report(root: Path, chart_dir: Path, lock: lockmod.Lock) -> dict | None:
    """The report in ROOT (a chart, or a stored build: charts/ and crds/) when it was built from CHART_DIR's
    lock and every archive and CRD it names is there, else None."""
    try:
        report = json.loads((root / "charts" / REPORT).read_text())
    except (OSError, ValueError):
        return None
    archives = [root / "charts" / f"{p.name}-{p.version}.tgz" for p in lock.charts()]
    crds = [root / "crds" / f"{name}.yaml" for name in report.get("crds", [])]
    if report.get("fingerprint") != fingerprint(chart_dir, lock) or not all(p.is_file() for p in archives + crds):
        return None
    return report


def up_to_date(chart_dir: Path, lock: lockmod.Lock) -> dict | None:
    """The last report when charts/ and crds/ were built from exactly this lock, else None."""
    return _whole_report(chart_dir, chart_dir, lock)


def _store_dir(chart_dir: Path, lock: lockmod.Lock, used: str) -> Path:
    """Where built dependencies are kept for other checkouts: by what they are built from and by the
    code that builds them (this module and chartpack), and by the source used (OCI or upstream)."""
    code = "".join(Path(m.__file__ or "").read_text() for m in (sys.modules[__name__], chartpack))
    key = hashlib.sha256((fingerprint(chart_dir, lock) + code).encode()).hexdigest()[:24]
    return paths.cache_dir() / "deps" / f"{key}-{used}"


def _stage_from_store(chart_dir: Path, lock: lockmod.Lock, source: str, staging: Path) -> dict | None:
    """Copy a stored build of this lock into STAGING (a fresh checkout of a commit built before);
    its report, or None when none is stored whole."""
    for used in (("oci", "source") if source == "auto" else (source,)):
        stored = _store_dir(chart_dir, lock, used)
        report = _whole_report(stored, chart_dir, lock)
        if report is None:
            continue
        for sub in ("charts", "crds"):
            shutil.copytree(stored / sub, staging / sub)
        (staging / "charts" / REPORT).unlink()  # written again, last, by build
        return report
    return None


def _stage_build(chart_dir: Path, lock: lockmod.Lock, source: str, staging: Path) -> dict:
    """Build the dependencies into STAGING/charts and the CRDs into STAGING/crds; the report."""
    out_dir = staging / "charts"
    oci_error = ""
    used = "source"
    if source in ("auto", "oci"):
        with progress.step("helm dependency build (OCI chart repositories)"):
            oci_error = _try_oci(chart_dir, lock, out_dir)
        if not oci_error:
            used = "oci"
        elif source == "oci":
            raise UserError(f"the OCI chart repositories could not be reached: {oci_error}",
                            "check network access to the registries, or run 'trainstack deps --source source'")
        else:
            shutil.rmtree(out_dir, ignore_errors=True)
            progress.info(f"OCI chart repositories unreachable ({oci_error}); building from pinned upstream source")
    if used == "source":
        _build_from_source(chart_dir, lock, out_dir)
    charts = {p.name: f"{p.name}-{p.version}.tgz" for p in lock.charts()}
    missing = sorted(name for name in charts.values() if not (out_dir / name).is_file())
    if missing:
        raise UserError(f"{chart_dir / 'Chart.yaml'}: the {used} build left no {', '.join(missing)}",
                        "check the chart versions pinned under charts in trainstack.lock.yaml")
    crds = _write_crds(out_dir / charts["kubeflow-trainer"], lock, staging / "crds")
    return {"source": used, "oci_error": oci_error, "charts": charts, "crds": crds,
            "fingerprint": fingerprint(chart_dir, lock)}


def _to_store(chart_dir: Path, lock: lockmod.Lock, used: str) -> None:
    stored = _store_dir(chart_dir, lock, used)
    if (stored / "charts" / REPORT).is_file():
        return
    tmp = stored.with_name(stored.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    for sub in ("charts", "crds"):
        (tmp / sub).mkdir(parents=True)
        for item in (chart_dir / sub).iterdir():
            if item.is_file() and (sub == "crds" or _ours_in_charts(item)):
                shutil.copyfile(item, tmp / sub / item.name)
    try:
        tmp.rename(stored)
    except OSError:  # another checkout stored the same build first
        shutil.rmtree(tmp, ignore_errors=True)


def build(source: str = "auto", chart_dir: Path | None = None, lock: lockmod.Lock | None = None,
          force: bool = True, sources: bool = True) -> DepsResult:
    """Fill charts/ (and crds/) of the umbrella chart. source: auto | oci | source.

    With force=False nothing is done when they were already built from this lock. With
    sources=False the lock's other sources are not fetched ahead of time (a render needs none).
    One build at a time per chart; the files are built aside and moved in one by one, so a render
    running meanwhile never finds one missing."""
    lock = lock or lockmod.load()
    chart_dir = chart_dir or paths.chart_dir()
    if source not in ("auto", "oci", "source"):
        raise UserError(f"unknown dependency source '{source}'", "use auto, oci or source", exit_code=2)
    verify_chart_lock(chart_dir, lock)
    out_dir = chart_dir / "charts"
    with _exclusive(chart_dir):
        previous = None if force else up_to_date(chart_dir, lock)
        if previous and source in ("auto", previous["source"]):
            charts = {name: str(out_dir / archive) for name, archive in previous["charts"].items()}
            return DepsResult(source=previous["source"], charts=charts, crds=previous["crds"],
                              oci_error=previous.get("oci_error", ""), skipped=True)
        with _staging(chart_dir) as staging:
            stored = None if force else _stage_from_store(chart_dir, lock, source, staging)
            built = stored is None
            report = {**_stage_build(chart_dir, lock, source, staging), "sources": {}} if stored is None else stored
            if sources:  # what a full `trainstack deps` does besides: every other pinned source, verified
                report["sources"] = fetch_sources(lock)
            (staging / "charts" / REPORT).write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
            _install(staging / "crds", chart_dir / "crds", lambda path: True)
            _install(staging / "charts", out_dir, _ours_in_charts)
        if built:
            _to_store(chart_dir, lock, report["source"])
    charts = {name: str(out_dir / archive) for name, archive in report["charts"].items()}
    return DepsResult(source=report["source"], charts=charts, crds=report["crds"],
                      oci_error=report.get("oci_error", ""))


def ensure(lock: lockmod.Lock | None = None) -> None:
    """Build the dependencies when they are missing (render and e2e call this); a second process
    asking meanwhile waits for the first build and then finds it done."""
    chart_dir = paths.chart_dir()
    report = chart_dir / "charts" / REPORT
    lock = lock or lockmod.load()
    if report.is_file() and up_to_date(chart_dir, lock):
        return
    build(lock=lock, force=False, sources=False)
