"""Which metrics the platform's controllers really expose, and whether the alerts and the
dashboard use only those.

The names come from the pinned upstream sources, never from a list kept here: each controller's
module zip (the chart source pinned in the lock, h1-verified), and the libraries that register
its metrics (controller-runtime, client_golang) at the versions its go.mod requires, each zip
verified against the h1: line of that go.sum. kube-state-metrics and the blackbox exporter
(the cluster's, for pod/job state and certificate expiry) are pinned under `sources`.

A scan reads the Go metric definitions (`prometheus.NewCounterVec(prometheus.CounterOpts{
Namespace, Subsystem, Name})`, `prometheus.NewDesc("name", ...)`, kube-state-metrics'
`NewFamilyGenerator*("kube_...")`), resolving string constants, so a renamed metric upstream
fails the tests instead of silently failing an alert in production.

The tracking server's metrics (the chart's `tracking`) come from MLflow's exporter,
prometheus-flask-exporter: its Python source at the version the lock pins for the server image, with
the prefix MLflow gives it (mlflow/server/prometheus_exporter.py of the pinned MLflow).

`verify_scrape` is for a live cluster: it takes each controller's `/metrics` text and says
which names the rules and the dashboard use that the controller did not serve.
"""

from __future__ import annotations

import json
import re
import ssl
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from . import chartpack, deps, helm, paths, tools, trainenv, yamlio
from . import lock as lockmod
from .errors import UserError
from .jsontypes import dig

# The controllers trainstack can install: their module is the lock's chart source of that name
# (Kueue only where the lock pins its chart).
CONTROLLERS = {"trainer": "kubeflow-trainer", "jobset": "jobset", "lws": "lws", "kueue": "kueue"}
# The ServiceMonitor job label of each controller's metrics Service (templates/monitoring/metrics-services.yaml).
JOBS = {name: f"trainstack-{name}-metrics" for name in CONTROLLERS}
# Libraries whose metric definitions end up on a controller-runtime manager's /metrics,
# and the folders of each that define them.
LIBRARIES = {
    "sigs.k8s.io/controller-runtime": ("pkg/",),
    "github.com/prometheus/client_golang": ("prometheus/process_collector", "prometheus/go_collector"),
}
# Metrics that Prometheus itself writes for every target or rule: no exporter defines them.
PROMETHEUS_BUILTINS = {"up", "scrape_duration_seconds", "scrape_samples_scraped", "ALERTS", "ALERTS_FOR_STATE"}

# Any Opts literal: inside New*Vec(...) or assigned to a variable first (blackbox exporter).
_NEW_OPTS = re.compile(r"(?<![\w])(?:\w+\.)?(Counter|Gauge|Histogram|Summary)Opts\{")
_NEW_DESC = re.compile(r"\bNewDesc\(\s*(?:\w+\s*\+\s*)?\"([a-zA-Z_:][a-zA-Z0-9_:]*)\"")
_KSM_FAMILY = re.compile(r"\bNew(?:OptIn)?FamilyGenerator(?:WithStability)?\(\s*(\"[a-z_:][a-z0-9_:]*\"|\w+)")
_CONST = re.compile(r"^\s*(?:const\s+|var\s+)?(\w+)\s*(?:string\s*)?=\s*(\"[^\"]*\"|[A-Za-z_][\w.]*)\s*(?://.*)?$",
                    re.MULTILINE)
_FIELD = re.compile(r"(?:^|,)\s*(Namespace|Subsystem|Name)\s*:\s*(\"[^\"]*\"|`[^`]*`|[A-Za-z_][\w.]*)\s*(?=,|$)",
                    re.MULTILINE)


@dataclass
class Scan:
    """Metric names (with the series suffixes Prometheus stores) and where each was defined."""

    names: dict[str, str] = field(default_factory=dict)  # series name -> "module@version/file"

    def add(self, name: str, kind: str, origin: str) -> None:
        suffixes = {"Histogram": ("_bucket", "_sum", "_count"), "Summary": ("_sum", "_count")}.get(kind, ())
        for series in (name, *(name + s for s in suffixes)):
            self.names.setdefault(series, origin)


# ----------------------------------------------------------------------------- module zips
def _zip_for(module: str, version: str, expected_sum: str) -> Path:
    """The module zip from the Go module proxy, checked against the h1: sum we were given."""
    info = tools.module_info(module, version)
    zip_path = Path(info["Zip"])
    marker = paths.cache_dir() / "monitoring" / "verified" / re.sub(r"[^\w.@-]", "_", f"{module}@{version}")
    if not (marker.is_file() and marker.read_text().strip() == expected_sum):
        actual = chartpack.module_h1(zip_path)
        if actual != expected_sum:
            raise UserError(f"checksum mismatch for {module}@{version}: expected {expected_sum}, "
                            f"the module zip hashes to {actual}", "do not use this module; check the lock file")
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(expected_sum + "\n")
    return zip_path


def _requirements(zip_path: Path, module: str, version: str) -> tuple[dict[str, str], dict[str, str]]:
    """(module -> version from go.mod, "module version" -> h1 from go.sum) of a verified zip."""
    root = f"{module}@{version}/"
    with zipfile.ZipFile(zip_path) as archive:
        gomod = archive.read(root + "go.mod").decode()
        gosum = archive.read(root + "go.sum").decode() if root + "go.sum" in archive.namelist() else ""
    required = dict(re.findall(r"^\s*(?:require\s+)?([\w./-]+)\s+(v[\w.+-]+)(?:\s*//.*)?$", gomod, re.MULTILINE))
    replaced = re.findall(r"^\s*(?:replace\s+)?([\w./-]+)(?:\s+v\S+)?\s+=>\s+([\w./-]+)\s+(v\S+)", gomod, re.MULTILINE)
    for old, _new, new_version in replaced:
        required[old] = new_version
    sums = {f"{m} {v}": h for m, v, h in re.findall(r"^(\S+) (v[^/\s]+) (h1:\S+)$", gosum, re.MULTILINE)}
    return required, sums


def _go_files(zip_path: Path, root: str, prefixes: tuple[str, ...]) -> dict[str, str]:
    """Non-test Go sources under root+prefix (relative path -> text)."""
    out = {}
    with zipfile.ZipFile(zip_path) as archive:
        for name in archive.namelist():
            rel = name[len(root):]
            if (name.startswith(root) and rel.endswith(".go") and not rel.endswith("_test.go")
                    and any(rel.startswith(p) for p in prefixes)
                    and not re.search(r"(^|/)(test|testing|testdata|hack|examples?)/", rel)):
                out[rel] = archive.read(name).decode(errors="replace")
    return out


# ----------------------------------------------------------------------------- Go scanning
def _constants(files: dict[str, str]) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """String constants per folder, and all of them by bare name (for pkg.Name references;
    a string literal wins over an alias such as `X = metrics.X`)."""
    per_dir: dict[str, dict[str, str]] = {}
    everywhere: dict[str, str] = {}
    for rel, text in sorted(files.items()):
        folder = rel.rsplit("/", 1)[0]
        for name, value in _CONST.findall(text):
            per_dir.setdefault(folder, {}).setdefault(name, value)
            if name not in everywhere or (value.startswith('"') and not everywhere[name].startswith('"')):
                everywhere[name] = value
    return per_dir, everywhere


def _resolve(token: str, local: dict[str, str], everywhere: dict[str, str], depth: int = 0) -> str | None:
    if token.startswith(('"', "`")):
        return token[1:-1]
    if depth > 5:
        return None
    bare = token.rsplit(".", 1)[-1]
    value = local.get(token) if "." not in token else None
    if value is None or value.rsplit(".", 1)[-1] == bare:  # `X = pkg.X`: look in the other package
        value = everywhere.get(bare)
    return None if value is None else _resolve(value, local, everywhere, depth + 1)


def _braced(text: str, start: int) -> str:
    """The text from start (just after a '{') to its matching '}'."""
    depth, i = 1, start
    while i < len(text) and depth:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    return text[start:i - 1]


def scan_go(files: dict[str, str], origin: str, extra_constants: dict[str, str] | None = None) -> Scan:
    """Metric definitions in Go sources: Opts structs with Namespace/Subsystem/Name, and NewDesc."""
    per_dir, everywhere = _constants(files)
    everywhere = {**(extra_constants or {}), **everywhere}
    scan = Scan()
    for rel, text in sorted(files.items()):
        local = per_dir.get(rel.rsplit("/", 1)[0], {})
        for match in _NEW_OPTS.finditer(text):
            body = _braced(text, match.end())
            top = re.sub(r"\{[^{}]*\}", "{}", body)  # drop nested literals (ConstLabels, Buckets)
            fields = {k: _resolve(v, local, everywhere) for k, v in _FIELD.findall(top + ",")}
            if not fields.get("Name"):
                continue
            name = "_".join(p for p in (fields.get("Namespace"), fields.get("Subsystem"), fields["Name"]) if p)
            scan.add(name, match.group(1), f"{origin}/{rel}")
        for match in _NEW_DESC.finditer(text):
            scan.add(match.group(1), "", f"{origin}/{rel}")
    return scan


def scan_ksm(files: dict[str, str], origin: str) -> Scan:
    """kube-state-metrics families (`NewFamilyGeneratorWithStability("kube_pod_status_phase", ...)`)."""
    per_dir, everywhere = _constants(files)
    scan = Scan()
    for rel, text in sorted(files.items()):
        local = per_dir.get(rel.rsplit("/", 1)[0], {})
        for match in _KSM_FAMILY.finditer(text):
            name = _resolve(match.group(1), local, everywhere)
            if name and name.startswith("kube_"):
                scan.add(name, "", f"{origin}/{rel}")
    return scan


# ----------------------------------------------------------------------------- what is exposed
def _cache_file(key: str) -> Path:
    safe = re.sub(r"[^\w.@-]", "_", key)
    return paths.cache_dir() / "monitoring" / f"{safe}.json"


SCAN_VERSION = 2  # bump when the scanner changes, so cached scans are redone


def _cached(key: str, build) -> dict[str, str]:
    path = _cache_file(f"{key}-v{SCAN_VERSION}")
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        names = build()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(names, indent=1, sort_keys=True))
        return names


def controller_metrics(controller: str, lock: lockmod.Lock | None = None) -> dict[str, str]:
    """Every metric series name the pinned `controller` (trainer, jobset, lws) can expose on
    /metrics, with the source file that defines it."""
    lock = lock or lockmod.load()
    if controller not in CONTROLLERS:
        raise UserError(f"unknown controller '{controller}'", f"use one of {', '.join(CONTROLLERS)}")
    source = lock.chart(CONTROLLERS[controller]).source

    def build() -> dict[str, str]:
        zip_path = _zip_for(source.module, source.version, source.sum)
        required, sums = _requirements(zip_path, source.module, source.version)
        root = f"{source.module}@{source.version}/"
        own = _go_files(zip_path, root, ("pkg/", "cmd/", "main.go"))
        scan = Scan()
        lib_constants: dict[str, str] = {}
        for library, prefixes in LIBRARIES.items():
            version = required.get(library)
            if not version:
                continue
            expected = sums.get(f"{library} {version}")
            if not expected:
                raise UserError(f"{source.module}@{source.version}: go.sum has no h1: line for {library} {version}")
            lib_zip = _zip_for(library, version, expected)
            lib_files = _go_files(lib_zip, f"{library}@{version}/", prefixes)
            _, consts = _constants(lib_files)
            lib_constants.update(consts)
            scan.names.update({k: v for k, v in scan_go(lib_files, f"{library}@{version}").names.items()
                               if k not in scan.names})
        for name, origin in scan_go(own, f"{source.module}@{source.version}", lib_constants).names.items():
            scan.names.setdefault(name, origin)
        return scan.names

    return _cached(f"{controller}-{source.module}@{source.version}", build)


def source_metrics(name: str, lock: lockmod.Lock | None = None) -> dict[str, str]:
    """Metric names of a pinned `sources` entry: kube-state-metrics or blackbox-exporter."""
    lock = lock or lockmod.load()
    source = lock.source(name)

    def build() -> dict[str, str]:
        zip_path = _zip_for(source.module, source.version, source.sum)
        root = f"{source.module}@{source.version}/"
        origin = f"{source.module}@{source.version}"
        if name == "kube-state-metrics":
            return scan_ksm(_go_files(zip_path, root, ("internal/store/",)), origin).names
        return scan_go(_go_files(zip_path, root, ("prober/",)), origin).names

    return _cached(f"{name}-{source.module}@{source.version}", build)


# The tracking server's exporter: its `known_metrics` key (its job: trainstack-tracking-metrics,
# templates/tracking/metrics-service.yaml).
TRACKING = "tracking"
_PY_METRIC = re.compile(r"\b(Counter|Gauge|Histogram|Summary|info)\(\s*'%s([a-z_:][a-z0-9_:]*)'\s*%\s*prefix")


def scan_python_exporter(source: str, prefix: str, origin: str) -> dict[str, str]:
    """Series names prometheus-flask-exporter's default metrics get with PREFIX: `Counter('%shttp_request_total'
    % prefix, ...)` and the like (a histogram's _bucket, _sum and _count)."""
    scan = Scan()
    for kind, name in _PY_METRIC.findall(source):
        scan.add(f"{prefix}_{name}", kind, origin)
    return scan.names


def _pinned_package(packages: list[str], name: str) -> str:
    for requirement in packages:
        found = re.fullmatch(rf"{re.escape(name)}(?:\[[^\]]*\])?==(\S+)", requirement.strip())
        if found:
            return found.group(1)
    raise UserError(f"trainstack.lock.yaml: tracking.server pins no {name}", "the tracking server's metrics come from it")


def tracking_metrics(lock: lockmod.Lock | None = None) -> dict[str, str]:
    """Metric names of the tracking server: the pinned prometheus-flask-exporter's defaults, with the prefix
    the pinned MLflow gives them."""
    lock = lock or lockmod.load()
    packages = list(lock.get("tracking", "server") or [])
    exporter, mlflow = (_pinned_package(packages, n) for n in ("prometheus-flask-exporter", "mlflow-skinny"))

    def build() -> dict[str, str]:
        with zipfile.ZipFile(trainenv.wheel("mlflow-skinny", mlflow)) as wheel:
            hook = wheel.read("mlflow/server/prometheus_exporter.py").decode()
        found = re.search(r"defaults_prefix\s*=\s*[\"']([a-z_]+)[\"']", hook)
        if not found:
            raise UserError(f"mlflow-skinny=={mlflow}: no defaults_prefix in mlflow/server/prometheus_exporter.py",
                            "MLflow changed how it exports metrics: read the file and update monitoring.py")
        with zipfile.ZipFile(trainenv.wheel("prometheus-flask-exporter", exporter)) as wheel:
            source = wheel.read("prometheus_flask_exporter/__init__.py").decode()
        names = scan_python_exporter(source, found.group(1),
                                     f"prometheus-flask-exporter=={exporter}/prometheus_flask_exporter/__init__.py")
        if not names:
            raise UserError(f"prometheus-flask-exporter=={exporter}: no metric definitions found",
                            "its source changed shape: update monitoring.scan_python_exporter")
        return names

    return _cached(f"tracking-prometheus-flask-exporter@{exporter}-mlflow@{mlflow}", build)


def pinned_controllers(lock: lockmod.Lock | None = None) -> list[str]:
    charts = (lock or lockmod.load()).data.get("charts") or {}
    return [name for name, chart in CONTROLLERS.items() if chart in charts]


@lru_cache(maxsize=1)
def known_metrics() -> dict[str, dict[str, str]]:
    """Exporter -> {series name -> defining file}, for every exporter the rules may use."""
    lock = lockmod.load()
    out = {c: controller_metrics(c, lock) for c in pinned_controllers(lock)}
    for name in ("kube-state-metrics", "blackbox-exporter"):
        out[name] = source_metrics(name, lock)
    out[TRACKING] = tracking_metrics(lock)
    return out


# ----------------------------------------------------------------------------- PromQL
_PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
                    "unless", "offset", "inf", "nan", "atan2", "start", "end"}


def promql_metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression selects: identifiers that are not functions, keywords,
    label names (inside {} and grouping lists) or durations; `{__name__="x"}` counts too."""
    names = set(re.findall(r"__name__\s*=\s*\"([^\"]+)\"", expr))
    text = re.sub(r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'|`[^`]*`", '""', expr)
    text = re.sub(r"\{[^{}]*\}", " ", text)          # label matchers
    text = re.sub(r"\[[^\[\]]*\]", " ", text)        # ranges and subqueries
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", " ", text)
    text = re.sub(r"\$\w+|\$\{[^}]*\}", " ", text)    # Grafana variables such as $__rate_interval
    for match in re.finditer(r"(?<![\w.:])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", text):
        word, call = match.group(1), match.group(2)
        if call or word.lower() in _PROMQL_KEYWORDS or re.fullmatch(r"\d+[smhdwy]?", word):
            continue
        if re.fullmatch(r"(\d+(ms|s|m|h|d|w|y))+", word):
            continue
        names.add(word)
    return names


def unknown_metrics(exprs: dict[str, str]) -> dict[str, set[str]]:
    """where -> metric names used there that no pinned exporter defines (empty: all real)."""
    defined = set(PROMETHEUS_BUILTINS)
    for names in known_metrics().values():
        defined.update(names)
    return {where: missing for where, expr in exprs.items() if (missing := promql_metric_names(expr) - defined)}


def owner_of(metric: str) -> list[str]:
    return [exporter for exporter, names in known_metrics().items() if metric in names]


# ----------------------------------------------------------------------------- rules, dashboard
def dashboard_exprs(dashboard: dict[str, Any]) -> dict[str, str]:
    """'panel <id> <title>' -> expr, for every target of every panel (rows included)."""
    out = {}

    def walk(panels):
        for panel in panels or []:
            for i, target in enumerate(panel.get("targets") or []):
                if target.get("expr"):
                    out[f"panel {panel.get('id')} {panel.get('title')!r} target {i}"] = target["expr"]
            walk(panel.get("panels"))

    walk(dashboard.get("panels"))
    for var in dig(dashboard, "templating", "list") or []:
        query = var.get("query")
        if var.get("type") == "query":
            text = query.get("query") if isinstance(query, dict) else query
            match = re.match(r"label_values\((.*),\s*\w+\)\s*$", text or "")
            if match:
                out[f"variable {var.get('name')}"] = match.group(1)
    return out


def rule_exprs(groups: list[dict]) -> dict[str, str]:
    """'alert <name>' / 'record <name>' -> expr of every rule in PrometheusRule groups."""
    return {f"{'alert' if 'alert' in r else 'record'} {r.get('alert') or r.get('record')}": str(r["expr"])
            for g in groups for r in g.get("rules", [])}


def chart_dashboards() -> dict[str, dict]:
    """The dashboards the chart ships (charts/trainstack/dashboards/*.json)."""
    folder = paths.chart_dir() / "dashboards"
    out = {}
    for path in sorted(folder.glob("*.json")):
        try:
            out[path.name] = json.loads(path.read_text())
        except ValueError as err:
            raise UserError(f"{path}: not valid JSON: {err}") from None
    return out


# ----------------------------------------------------------------------------- live scrape
def parse_exposition(text: str) -> set[str]:
    """Series names in a Prometheus text exposition (what a /metrics endpoint serves)."""
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            parts = line.split()
            if len(parts) >= 3:
                names.add(parts[2])
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{\s]", line, maxsplit=1)[0])
    return names


def shipped_rule_groups() -> list[dict]:
    """The chart's alert rules with every controller wired (monitoring forced, data cache on),
    rendered with the pinned helm: what any environment that turns monitoring on can ship."""
    deps.ensure()
    result = helm.run(helm.template_args(None, "--show-only", "templates/monitoring/prometheusrule.yaml",
                                         "--set", "monitoring.enabled=true", "--set", "monitoring.prometheusOperator=always",
                                         "--set", "dataCache.enabled=true", "--set", "tracking.enabled=true"))
    docs = [d for d in yamlio.load_all(result.stdout) if isinstance(d, dict) and d.get("kind") == "PrometheusRule"]
    return [g for d in docs for g in d["spec"]["groups"]]


def expected_from(controller: str, groups: list[dict] | None = None) -> set[str]:
    """Names the shipped rules (default: shipped_rule_groups()) and dashboards use that
    `controller`'s pinned source defines (TRACKING: the tracking server's exporter)."""
    exprs = rule_exprs(shipped_rule_groups() if groups is None else groups)
    for dashboard in chart_dashboards().values():
        exprs.update(dashboard_exprs(dashboard))
    used = set().union(*(promql_metric_names(e) for e in exprs.values()))
    return used & set(tracking_metrics() if controller == TRACKING else controller_metrics(controller))


class ScrapeError(UserError):
    """A scrape that failed; `status` is the HTTP status the server answered (401, 403, ...), or None
    where none came (refused, timed out, TLS)."""

    def __init__(self, url: str, err: OSError) -> None:
        super().__init__(f"cannot scrape {url}: {err}", "is the controller running and the token allowed /metrics?")
        self.status: int | None = err.code if isinstance(err, urllib.error.HTTPError) else None


def scrape(url: str, token: str | None = None, timeout: float = 10) -> str:
    """GET a controller's /metrics over HTTPS (the controllers serve self-signed certificates:
    the certificate is not verified; the bearer token is what JobSet and LWS check). A ScrapeError
    where it fails."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            return response.read().decode()
    except OSError as err:
        raise ScrapeError(url, err) from None


def verify_scrape(texts: dict[str, str], groups: list[dict] | None = None) -> dict[str, dict[str, list[str]]]:
    """controller -> {"present": [...], "missing": [...]}: of the metric names the shipped rules
    and dashboards use that the controller's pinned source defines, which its /metrics text
    (`texts[controller]`, e.g. from `scrape`) served. Vector metrics appear only after their first
    event (a webhook call, a failed JobSet): scrape after the workload ran."""
    groups = shipped_rule_groups() if groups is None else groups
    report = {}
    for controller, text in texts.items():
        served = parse_exposition(text)
        expected = expected_from(controller, groups)
        report[controller] = {"present": sorted(expected & served), "missing": sorted(expected - served)}
    return report


# ----------------------------------------------------------------------------- CLI
