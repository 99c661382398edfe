"""`trainstack lint` (`make lint`, run by `make test`): ruff over the Python, `helm lint --strict`
over the chart with its defaults and with each environment's values, the layer contract (who may
import whom, no import cycles), mypy over the package, and no dated figure in a comment (the
reference is not the record: a date next to a figure belongs in bench/results/ or a commit body).

Every tool is pinned by the lock (`python.test`, exact versions: what they report changes from
release to release) and checked here against what is installed; helm is the lock's helm v4.
The layers live in layers.toml at the repository root; docs/architecture.md explains them.
"""

from __future__ import annotations

import ast
import io
import json
import os
import re
import sys
import tokenize
import tomllib
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet

from . import helm, paths, proc, tools
from . import lock as lockmod
from . import render as rendermod
from .errors import UserError, output_line

PYTHON_TREES = ("scripts", "tests", "examples")
PACKAGE = "trainstack"
LAYERS_FILE = "layers.toml"
CHECKS = ("ruff", "helm lint", "layers", "cycles", "mypy", "dated figures")


@dataclass
class Check:
    name: str
    problems: list[str] = field(default_factory=list)
    skipped: str = ""

    @property
    def ok(self) -> bool:
        return not self.problems


def _require_pinned(lock: lockmod.Lock, package: str) -> None:
    """The installed PACKAGE is the version the lock pins (python.test), else a UserError."""
    wanted = SpecifierSet(lock.get("python", "test", package))
    try:
        installed = metadata.version(package)
    except metadata.PackageNotFoundError:
        raise UserError(f"{package} is not installed (the lock pins {package}{wanted})", "run 'make venv'") from None
    if installed not in wanted:
        raise UserError(f"{package} {installed} is installed but the lock pins {package}{wanted}", "run 'make venv'")


def ruff_check(lock: lockmod.Lock, trees: tuple[str, ...] = PYTHON_TREES, root: Path | None = None) -> Check:
    """ruff check over TREES (relative to ROOT, default the repository), with pyproject.toml's settings."""
    check = Check("ruff")
    _require_pinned(lock, "ruff")
    root = root or paths.repo_root()
    result = proc.run([sys.executable, "-m", "ruff", "check", "--output-format", "concise", "--no-cache",
                       "--config", str(paths.repo_root() / "pyproject.toml"),
                       *[t for t in trees if (root / t).exists()]],
                      check=False, cwd=root, timeout=300, what="ruff check")
    if result.returncode not in (0, 1):
        raise UserError(f"ruff failed: {output_line(result.stderr or result.stdout, markers=())}")
    check.problems = [line for line in result.stdout.splitlines()
                      if line.strip() and not line.startswith(("Found ", "[*]", "No fixes", "All checks passed"))]
    return check


def helm_lint(lock: lockmod.Lock, runs: dict[str, list[Path]] | None = None) -> Check:
    """`helm lint --strict` with the chart's defaults, then with each environment's values files
    (RUNS: label -> values files, default every environment under overlays/)."""
    check = Check("helm lint")
    chart = paths.chart_dir()
    if runs is None:
        runs = {"defaults": []} | {env: rendermod.values_files(env) for env in rendermod.environments()}
    for label, files in runs.items():
        values = [arg for f in files for arg in ("-f", str(f))]
        result = helm.run(["lint", "--strict", str(chart), *values], lock=lock, check=False, timeout=300)
        if result.returncode != 0:
            lines = [ln.strip() for ln in (result.stdout + result.stderr).splitlines()
                     if ln.strip().startswith(("[ERROR]", "[WARNING]", "Error:"))]
            check.problems.append(f"{label}: {lines[0] if lines else helm.first_error_line(result.stderr)}")
    return check


# ---- the layer contract ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Layer:
    name: str
    modules: tuple[str, ...]  # relative to the package; "(name)" is optional (may not exist yet)


def load_layers(spec: Path | None = None) -> list[Layer]:
    """The layers of layers.toml, top (cli) to bottom (core)."""
    spec = spec or paths.repo_root() / LAYERS_FILE
    try:
        data = tomllib.loads(spec.read_text())
        return [Layer(str(entry["name"]), tuple(str(m) for m in entry["modules"])) for entry in data["layer"]]
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError) as err:
        raise UserError(f"{spec}: not a layer contract: {err}", "see docs/architecture.md") from None


@dataclass(frozen=True)
class Only:
    package: str  # an outside package (kubernetes)
    modules: tuple[str, ...]  # the modules of the package that may import it, relative to the package


def load_only(spec: Path | None = None) -> list[Only]:
    """The [[only]] entries of layers.toml: an outside package that only the named modules import."""
    spec = spec or paths.repo_root() / LAYERS_FILE
    try:
        data = tomllib.loads(spec.read_text())
        return [Only(str(entry["package"]), tuple(str(m) for m in entry["modules"])) for entry in data.get("only", [])]
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError) as err:
        raise UserError(f"{spec}: not a layer contract: {err}", "see docs/architecture.md") from None


def contract_checks(package_root: Path | None = None, spec: Path | None = None) -> list[Check]:
    """The layer contract and the no-cycles contract over the package under PACKAGE_ROOT (the folder
    holding trainstack/, default scripts/). The graph is built in a child Python whose path starts at
    PACKAGE_ROOT, so a copy of the package is checked as it is on disk, not as this process imported it."""
    root = (package_root or paths.repo_root() / "scripts").resolve()
    spec = (spec or paths.repo_root() / LAYERS_FILE).resolve()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    code = "import sys; from trainstack import lint; sys.exit(lint.contracts_main(sys.argv[1]))"
    result = proc.run([sys.executable, "-c", code, str(spec)], check=False, env=env, cwd=root, timeout=300,
                      what="the layer contract")
    try:
        found = json.loads(result.stdout)
    except json.JSONDecodeError:
        raise UserError(f"the layer contract could not run: {output_line(result.stderr or result.stdout)}") from None
    return [Check(name, problems) for name, problems in found.items()]


def contracts_main(spec: str) -> int:
    """Child side of contract_checks: print {"layers": [...], "cycles": [...]} as JSON."""
    import grimp
    from importlinter import configuration
    from importlinter.domain.contract import InvalidContractOptions

    configuration.configure()  # import-linter's settings (its timer, its printer), as its own CLI does
    graph = grimp.build_graph(PACKAGE, include_external_packages=True, cache_dir=None)
    layers = load_layers(Path(spec))
    layers_problems, members = _expand(graph, layers)
    try:  # what is placed is checked even while a module is unplaced
        layers_problems += _layers_contract(graph, layers, members)
    except (ValueError, InvalidContractOptions) as err:  # a module in two layers: no contract to check
        layers_problems.append(f"{LAYERS_FILE}: the contract cannot be built: {err}")
    layers_problems += _only_contract(graph, load_only(Path(spec)))
    found = {"layers": layers_problems, "cycles": _cycles(graph)}
    print(json.dumps(found))
    return 0


def _expand(graph: Any, layers: list[Layer]) -> tuple[list[str], list[list[str]]]:
    """Each layer's modules as import-linter can take them. A package named in one layer stands for
    itself and every module under it that another layer does not name (trainstack.e2e is the testbed,
    trainstack.e2e.command the cli): it is split into its children, recursively."""
    problems: list[str] = []
    named: dict[str, bool] = {}  # full name -> optional
    for layer in layers:
        for module in layer.modules:
            optional = module.startswith("(") and module.endswith(")")
            full = f"{PACKAGE}.{module.strip('()')}"
            if full in named:
                problems.append(f"{LAYERS_FILE}: {full} is named twice")
            named[full] = optional
    for full, optional in named.items():
        if full not in graph.modules and not optional:
            problems.append(f"{LAYERS_FILE}: {full} does not exist (write it as '({full[len(PACKAGE) + 1:]})' "
                            "if it may not exist yet)")
    top = {child for child in graph.find_children(PACKAGE)}
    unlisted = sorted(m for m in top if m not in named and not any(n.startswith(m + ".") for n in named))
    problems += [f"{LAYERS_FILE}: {m} is in no layer" for m in unlisted]

    def rest(module: str) -> list[str]:
        if not any(n.startswith(module + ".") for n in named):
            return [module]
        own = sorted(m for m in graph.find_modules_directly_imported_by(module) if m.startswith(PACKAGE + "."))
        problems.extend(f"{module}: a package split across layers imports nothing ({module} -> {m})" for m in own)
        return [m for child in sorted(graph.find_children(module)) if child not in named for m in rest(child)]

    members = [[m for module in layer.modules if (full := f"{PACKAGE}.{module.strip('()')}") in graph.modules
                for m in rest(full)] for layer in layers]
    return problems, members


def _layers_contract(graph: Any, layers: list[Layer], members: list[list[str]]) -> list[str]:
    """import-linter's layers contract on the expanded layers (siblings in a layer may import each
    other; nothing imports upward): one line per illegal import chain, naming file and line."""
    from importlinter.contracts.layers import LayersContract

    layer_of = {m: layer.name for layer, modules in zip(layers, members, strict=True) for m in modules}
    options = {"layers": [" : ".join(m[len(PACKAGE) + 1:] for m in modules) for modules in members if modules],
               "containers": [PACKAGE]}
    contract = LayersContract(name="layers", session_options={"root_packages": [PACKAGE]}, contract_options=options)
    check = contract.check(graph, verbose=False)
    problems = []
    for dependency in check.metadata["invalid_dependencies"]:
        lower, higher = layer_of[dependency["importer"]], layer_of[dependency["imported"]]
        for route in dependency["routes"]:
            chain = route["chain"]
            modules = [chain[0]["importer"], *[link["imported"] for link in chain]]
            more = len(route["extra_firsts"]) + len(route["extra_lasts"])
            problems.append(f"{_where(chain[0])}: {' -> '.join(modules)} "
                            f"({lower} imports {higher}{f'; {more} more like it' if more else ''})")
    return sorted(problems)


def _only_contract(graph: Any, rules: list[Only]) -> list[str]:
    """Each [[only]] rule: a module of the package that imports the outside package directly and is not
    one of the rule's modules (nor under one of them), one line per import naming file and line."""
    problems = []
    for rule in rules:
        if rule.package not in graph.modules:
            continue
        allowed = [f"{PACKAGE}.{m}" for m in rule.modules]
        for importer in sorted(graph.find_modules_that_directly_import(rule.package)):
            if not importer.startswith(PACKAGE + ".") or any(importer == a or importer.startswith(a + ".")
                                                               for a in allowed):
                continue
            for detail in graph.get_import_details(importer=importer, imported=rule.package):
                problems.append(f"{_file(importer)}:{detail['line_number']}: {importer} -> {detail['imported']} "
                                f"(only {', '.join(allowed)} imports {rule.package})")
    return sorted(problems)


def _cycles(graph: Any) -> list[str]:
    """Modules that import each other, directly or round a longer loop: one line per strongly connected
    group of modules, naming its shortest cycle. Module by module, not package by package (import-linter's
    acyclic_siblings contract counts a package as one node, so a package split across layers, e2e and
    its cli command, would make legal imports look like a cycle)."""
    modules = sorted(m for m in graph.modules if m == PACKAGE or m.startswith(PACKAGE + "."))  # not the outside ones
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in modules}
    problems = []
    for group in _strongly_connected(modules, edges):
        if len(group) < 2:
            continue
        start = min(group)
        back = min((graph.find_shortest_chain(importer=n, imported=start) or () for n in edges[start] if n in group),
                   key=len)
        cycle = [start, *back]
        details = graph.get_import_details(importer=cycle[0], imported=cycle[1])
        line = details[0]["line_number"] if details else "?"
        rest = f" ({len(group)} modules in the loop: {', '.join(sorted(group))})" if len(group) >= len(cycle) else ""
        problems.append(f"{_file(start)}:{line}: import cycle: {' -> '.join(cycle)}{rest}")
    return sorted(problems)


def _strongly_connected(nodes: list[str], edges: dict[str, list[str]]) -> list[set[str]]:
    """Tarjan's strongly connected components, iteratively (no recursion limit on a long chain)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges.get(child, []))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == node:
                        break
                groups.append(group)
    return groups


def _file(module: str) -> str:
    """MODULE's file, relative to the folder that holds the package (trainstack/status.py)."""
    package = Path(sys.modules[PACKAGE].__file__ or PACKAGE).parent
    path = package.joinpath(*module.split(".")[1:])
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    return str(path.relative_to(package.parent))


def _where(link: dict) -> str:
    numbers = [n for n in link["line_numbers"] if n is not None]
    return f"{_file(link['importer'])}:{numbers[0] if numbers else '?'}"


# ---- mypy ------------------------------------------------------------------------------------------


def mypy_check(lock: lockmod.Lock, package_root: Path | None = None, files: list[Path] | None = None) -> Check:
    """mypy with pyproject.toml's [tool.mypy] over the package under PACKAGE_ROOT (default scripts/),
    or only FILES in it (their imports are followed): one problem per error, `path:line: error: ...`."""
    check = Check("mypy")
    _require_pinned(lock, "mypy")
    root = (package_root or paths.repo_root() / "scripts").resolve()
    # the checkout's own run keeps its cache in the tool cache, so a fresh clone (CI) starts warm (about 5 s);
    # mypy checks each source's hash against the cache, so other checkouts and edited files are checked again
    cache = paths.cache_dir() / "mypy" if package_root is None else root / ".mypy_cache"
    targets = [str(f) for f in files] if files else ["-p", PACKAGE]
    env = dict(os.environ, MYPYPATH=str(root))
    result = proc.run([sys.executable, "-m", "mypy", "--config-file", str(paths.repo_root() / "pyproject.toml"),
                       "--cache-dir", str(cache), "--no-error-summary", "--no-pretty", "--show-error-codes",
                       *targets], check=False, cwd=root, env=env, timeout=600, what="mypy")
    if result.returncode not in (0, 1):
        raise UserError(f"mypy failed: {output_line(result.stderr or result.stdout)}")
    check.problems = [line for line in result.stdout.splitlines() if ": error: " in line]
    return check


# ---- dated figures in comments ---------------------------------------------------------------------

# Comments and docstrings state the rule and point to the record (`# see bench/results/tests.json`); a date
# next to a figure (a timing and the day it was taken) is a record and goes to bench/results/ or a commit body.
DATED_TREES = ("scripts", "tests")
_MONTH = "(?:January|February|March|April|May|June|July|August|September|October|November|December)"
DATE = re.compile(rf"\b(?:\d{{1,2}}(?:\s+and\s+\d{{1,2}})?\s+{_MONTH}(?:\s+\d{{4}})?|{_MONTH}\s+\d{{1,2}},?\s+\d{{4}}"
                  rf"|\d{{4}}-\d{{2}}-\d{{2}})\b")
FIGURE = re.compile(r"\b\d[\d,]*(?:\.\d+)?\s*(?:ms|s|min|minutes?|seconds?|hours?|%|[KMG]i?B|CPU-s)(?![\w-])")
NEAR = 160  # characters either side of a date in which a figure makes it a dated figure


@dataclass(frozen=True)
class Prose:
    """A comment block or a docstring: where it starts (1-based line) and its text, lines joined by newlines."""
    line: int
    text: str


def python_prose(source: str) -> list[Prose]:
    """Every comment block (consecutive comment lines) and every docstring of a Python source."""
    found: list[Prose] = []
    block: list[tuple[int, str]] = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            if block and block[-1][0] != tok.start[0] - 1:
                found.append(Prose(block[0][0], "\n".join(text for _, text in block)))
                block = []
            block.append((tok.start[0], tok.string.lstrip("#").strip()))
    if block:
        found.append(Prose(block[0][0], "\n".join(text for _, text in block)))
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None and node.body:
                found.append(Prose(node.body[0].lineno, doc))
    return found


def makefile_prose(text: str) -> list[Prose]:
    """The Makefile's comment blocks and each target's `## help`."""
    found: list[Prose] = []
    block: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("#"):
            block.append((number, stripped.lstrip("#").strip()))
            continue
        if block:
            found.append(Prose(block[0][0], "\n".join(t for _, t in block)))
            block = []
        if " ## " in line and not line.startswith("\t"):
            found.append(Prose(number, line.split(" ## ", 1)[1]))
    if block:
        found.append(Prose(block[0][0], "\n".join(t for _, t in block)))
    return found


def dated_figures_in(prose: Prose) -> list[tuple[int, str]]:
    """(line, excerpt) for each date in PROSE with a figure within NEAR characters of it."""
    hits = []
    for date in DATE.finditer(prose.text):
        start, end = max(0, date.start() - NEAR), date.end() + NEAR
        if any(FIGURE.search(part) for part in (prose.text[start:date.start()], prose.text[date.end():end])):
            line = prose.line + prose.text.count("\n", 0, date.start())
            excerpt = " ".join(prose.text[max(0, date.start() - 40):date.end() + 10].split())
            hits.append((line, excerpt))
    return hits


def dated_figures(root: Path | None = None, trees: tuple[str, ...] = DATED_TREES,
                  makefile: str = "Makefile") -> Check:
    """No comment or docstring under TREES (Python) nor comment or help of the Makefile holds a dated figure."""
    check = Check("dated figures")
    root = root or paths.repo_root()
    sources: list[tuple[str, list[Prose]]] = []
    for tree in trees:
        for path in sorted((root / tree).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            rel = path.relative_to(root).as_posix()
            try:
                sources.append((rel, python_prose(path.read_text())))
            except (SyntaxError, tokenize.TokenError) as err:  # ruff reports the syntax itself
                check.problems.append(f"{rel}: cannot be read for comments ({err})")
    if (root / makefile).is_file():
        sources.append((makefile, makefile_prose((root / makefile).read_text())))
    for rel, prose in sources:
        for block in prose:
            for line, excerpt in dated_figures_in(block):
                check.problems.append(f"{rel}:{line}: a dated figure in a comment (\"{excerpt}\"): keep the rule, "
                                      "move the figure to bench/results/ or the commit body")
    return check


# ---- the command -----------------------------------------------------------------------------------


def run(lock: lockmod.Lock | None = None, only: list[str] | None = None) -> list[Check]:
    """Every check (or ONLY those named), in CHECKS order. helm lint is skipped, and says so, while
    the pinned helm is not built yet (make setup-chart builds it)."""
    lock = lock or lockmod.load()
    wanted = [name for name in CHECKS if not only or name in only]
    checks: list[Check] = []
    if "ruff" in wanted:
        checks.append(ruff_check(lock))
    if "helm lint" in wanted:
        if tools.find("helm", lock) is None:
            checks.append(Check("helm lint", skipped="the pinned helm is not built (run 'make setup-chart')"))
        else:
            checks.append(helm_lint(lock))
    if {"layers", "cycles"} & set(wanted):
        _require_pinned(lock, "import-linter")
        checks += [c for c in contract_checks() if c.name in wanted]
    if "mypy" in wanted:
        checks.append(mypy_check(lock))
    if "dated figures" in wanted:
        checks.append(dated_figures())
    return checks
