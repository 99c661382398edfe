"""Installs the pinned CLIs (helm, kustomize, kube-apiserver, ...) into a versioned cache.

Each tool is built from its Go module at the version in the lock, through a throw-away
wrapper module (so modules whose go.mod carries replace directives, such as k8s.io/kubernetes
and etcd, build too). A binary already on PATH is reused only when it reports the pinned
version. A stamp file marks a finished build, so a second install does no work.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import lock as lockmod
from . import paths, proc, progress
from .errors import UserError

STAMP = ".trainstack-tool.json"


@dataclass
class ToolStatus:
    tool: str
    binary: str
    version: str
    path: str
    status: str  # installed | on PATH | missing


def tool_dir(tool: lockmod.Tool) -> Path:
    return paths.cache_dir() / "tools" / tool.name / tool.version


def _stamp(tool: lockmod.Tool) -> dict | None:
    stamp = tool_dir(tool) / STAMP
    try:
        data = json.loads(stamp.read_text())
    except (OSError, ValueError):
        return None
    if data.get("module") != tool.module or data.get("version") != tool.version:
        return None
    if sorted(data.get("binaries", {})) != sorted(tool.packages):
        return None
    # The build recipe: only the stamp says how the binaries were built, so one without a recipe
    # (written before recipes were recorded) is rebuilt like one whose recipe changed.
    if data.get("recipe") != _recipe(tool):
        return None
    if not all(Path(p).is_file() for p in data["binaries"].values()):
        return None
    return data


def _recipe(tool: lockmod.Tool) -> dict:
    """What, besides the module and version, decides the binaries: a change rebuilds them."""
    recipe: dict[str, Any] = {"ldflags": tool.ldflags, "tags": list(tool.tags), "packages": tool.packages}
    # Only when set, so the stamps of tools that use none of them stay valid.
    if tool.go_toolchain:
        recipe["goToolchain"] = tool.go_toolchain
    if tool.copy_replaces:
        recipe["copyReplaces"] = True
    if tool.requires:
        recipe["require"] = dict(tool.requires)
    return recipe


def _reports_version(binary: str, tool: lockmod.Tool) -> bool:
    """True when `binary versionArgs` prints the pinned version (with or without a leading v)."""
    args = tool.version_args_for(Path(binary).name)
    if not args:
        return False
    try:
        out = proc.run([binary, *args], check=False, timeout=15)
    except proc.CommandError:
        return False
    text = out.stdout + out.stderr
    bare = re.escape(tool.version.lstrip("v"))
    return re.search(rf"(?<![\w.])v?{bare}(?![\w.])", text) is not None


def _on_path(binary: str, tool: lockmod.Tool) -> str | None:
    found = shutil.which(binary)
    if found and not Path(found).resolve().is_relative_to(paths.cache_dir()) and _reports_version(found, tool):
        return found
    return None


def find(binary: str, lock: lockmod.Lock | None = None) -> Path | None:
    """Path of the pinned `binary`, from the cache or PATH, or None when not installed."""
    lock = lock or lockmod.load()
    tool = lock.tool_for_binary(binary)
    stamp = _stamp(tool)
    if stamp:
        return Path(stamp["binaries"][binary])
    found = _on_path(binary, tool)
    return Path(found) if found else None


KUBECTL_SKEW = 1  # kubectl works with an API server one minor older or newer (Kubernetes' version skew policy)


def kubectl_minor(text: str) -> int | None:
    """The client's minor from `kubectl version --client -o json`; None when it is not such output."""
    try:
        minor = json.loads(text)["clientVersion"]["minor"]
        return int(str(minor).rstrip("+"))
    except (ValueError, KeyError, TypeError):
        return None


def find_kubectl(lock: lockmod.Lock | None = None) -> Path | None:
    """The pinned kubectl; else a kubectl on PATH within KUBECTL_SKEW minors of the lock's Kubernetes (what a
    CI runner has installed); None when neither."""
    lock = lock or lockmod.load()
    pinned = find("kubectl", lock)
    if pinned is not None:
        return pinned
    found = shutil.which("kubectl")
    if not found:
        return None
    try:
        out = proc.run([found, "version", "--client", "-o", "json"], check=False, timeout=15)
    except proc.CommandError:
        return None
    minor = kubectl_minor(out.stdout)
    wanted = int(lock.kubernetes_version.split(".")[1])
    return Path(found) if minor is not None and abs(minor - wanted) <= KUBECTL_SKEW else None


def require_kubectl(lock: lockmod.Lock | None = None) -> Path:
    """find_kubectl, or a UserError saying which kubectl would do and how to get one."""
    found = find_kubectl(lock)
    if found is None:
        version = (lock or lockmod.load()).kubernetes_version
        raise UserError(f"no kubectl {version} (or within one minor of it) is installed",
                        "run 'trainstack tools install kubernetes' (or 'make setup'), or put a kubectl on PATH")
    return found


def require(binary: str, lock: lockmod.Lock | None = None) -> Path:
    """Like find, but a missing tool is a UserError that says how to get it."""
    found = find(binary, lock)
    if found is None:
        tool = (lock or lockmod.load()).tool_for_binary(binary)
        raise UserError(
            f"{binary} {tool.version} is not installed",
            f"run 'trainstack tools install {tool.name}' (or 'make setup')",
        )
    return found


def status(lock: lockmod.Lock | None = None) -> list[ToolStatus]:
    lock = lock or lockmod.load()
    rows = []
    for tool in lock.tools():
        stamp = _stamp(tool)
        for binary in tool.packages:
            if stamp:
                rows.append(ToolStatus(tool.name, binary, tool.version, stamp["binaries"][binary], "installed"))
                continue
            found = _on_path(binary, tool)
            rows.append(ToolStatus(tool.name, binary, tool.version, found or "-", "on PATH" if found else "missing"))
    return rows


def _go_env() -> dict[str, str]:
    if not shutil.which("go"):
        raise UserError("the Go toolchain is not on PATH", "install Go 1.26+ to build the pinned tools")
    env = dict(os.environ)
    env.update({"GOTOOLCHAIN": "local", "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"})
    return env


def _run(cmd: list[str], cwd: Path, env: dict[str, str], log: Path) -> None:
    with log.open("a") as sink:
        sink.write(f"$ {' '.join(cmd)}\n")
        sink.flush()
        result = proc.run(cmd, check=False, cwd=cwd, env=env, stdout=sink, stderr=proc.STDOUT)
    if result.returncode != 0:
        tail = log.read_text().strip().splitlines()[-3:]
        raise UserError(
            f"'{' '.join(cmd[:3])}' failed in {cwd}: {' | '.join(tail)}",
            f"full log: {log}",
        )


def module_info(module: str, version: str, env: dict[str, str] | None = None) -> dict:
    """`go mod download -json module@version`: fetched through the Go proxy, checksum-verified."""
    env = env or _go_env()
    out = proc.run(["go", "mod", "download", "-json", f"{module}@{version}"], check=False, env=env, cwd="/")
    try:
        info = json.loads(out.stdout)
    except ValueError:
        info = {"Error": (out.stderr or out.stdout).strip()}
    if "Zip" not in info or not Path(info.get("Zip", "")).is_file():
        raise UserError(f"cannot download Go module {module}@{version}: {info.get('Error', 'no zip')}",
                        "check that the Go module proxy is reachable (go env GOPROXY)")
    return info


def _upstream_replaces(go_mod_file: str, env: dict[str, str]) -> list[str]:
    """The module's own `replace` directives that point at a published version (not a local path),
    as `go mod edit -replace` arguments: a wrapper module needs them to build what upstream builds."""
    out = proc.run(["go", "mod", "edit", "-json", go_mod_file], check=False, env=env, cwd="/")
    if out.returncode != 0:
        raise UserError(f"cannot read {go_mod_file}: {out.stderr.strip()}")
    args = []
    for rep in json.loads(out.stdout).get("Replace") or []:
        old, new = rep["Old"], rep["New"]
        if not new.get("Version"):
            continue  # a local path (./gitops-engine): the wrapper requires the published module instead
        lhs = f"{old['Path']}@{old['Version']}" if old.get("Version") else old["Path"]
        args.append(f"-replace={lhs}={new['Path']}@{new['Version']}")
    return args


def _build(tool: lockmod.Tool) -> dict:
    env = _go_env()
    if tool.go_toolchain:
        env["GOTOOLCHAIN"] = tool.go_toolchain  # fetched (checksum-verified) through the module proxy
    work = paths.cache_dir() / "build" / f"{tool.name}-{tool.version}"
    work.mkdir(parents=True, exist_ok=True)
    log = work / "build.log"
    log.write_text("")
    if not (work / "go.mod").exists():
        _run(["go", "mod", "init", f"trainstack.local/build/{tool.name}"], work, env, log)
    if tool.staging_replace:
        info = module_info(tool.module, tool.version, env)
        staging = re.findall(r"^\s*(\S+)\s+=>\s+\./staging/src/\S+", Path(info["GoMod"]).read_text(), re.MULTILINE)
        patch = f"v0.{tool.minor}.{tool.version.split('.')[2]}"
        for module in staging:
            _run(["go", "mod", "edit", f"-replace={module}={module}@{patch}"], work, env, log)
    if tool.copy_replaces:
        replaces = _upstream_replaces(module_info(tool.module, tool.version, env)["GoMod"], env)
        if replaces:
            _run(["go", "mod", "edit", *replaces], work, env, log)
    for module, version in tool.requires:
        _run(["go", "mod", "edit", f"-require={module}@{version}"], work, env, log)
    _run(["go", "get", *[f"{pkg}@{tool.version}" for pkg in tool.packages.values()]], work, env, log)
    target = tool_dir(tool)
    staging_bin = work / "out"
    shutil.rmtree(staging_bin, ignore_errors=True)
    staging_bin.mkdir()
    go_mod = Path(module_info(tool.module, tool.version, env)["GoMod"]).read_text() if "{k8s" in tool.ldflags else ""
    ldflags = f"-s -w {tool.expanded_ldflags(go_mod)}".strip()
    for binary, package in tool.packages.items():
        tags = ["-tags", ",".join(tool.tags)] if tool.tags else []
        _run(["go", "build", "-trimpath", *tags, "-ldflags", ldflags, "-o", str(staging_bin / binary), package],
             work, env, log)
    (target / "bin").mkdir(parents=True, exist_ok=True)
    binaries = {}
    for binary in tool.packages:
        dest = target / "bin" / binary
        os.replace(staging_bin / binary, dest)
        binaries[binary] = str(dest)
    return binaries


# Setup tiers: `chart` (what render, validate and docs need) is part of the default install;
# another tier (gitops) is built only when asked for by name or tier.
DEFAULT_TIERS = ("chart", "")


def selected(names: list[str] | None, lock: lockmod.Lock, include_optional: bool = True,
             tier: str | None = None) -> list[lockmod.Tool]:
    """The named tools; or those of `tier`; or every tool of the default tiers (and, optionally, the optional ones)."""
    if names:
        return [lock.tool(n) for n in names]
    if tier is not None:
        return [t for t in lock.tools() if t.tier == tier]
    return [t for t in lock.tools() if (include_optional or not t.optional) and t.tier in DEFAULT_TIERS]


# Tools built at once on a cold machine: each `go build` compiles with every CPU, but a build also waits on the
# module proxy and links alone, so a second one fills those gaps (four tools from empty Go caches: 262 s at once,
# 275 s one after another, on 2 cores).
BUILD_JOBS = 2


def install(names: list[str] | None = None, lock: lockmod.Lock | None = None,
            include_optional: bool = True, tier: str | None = None,
            jobs: int = BUILD_JOBS) -> list[tuple[str, str, str, float]]:
    """Install the named tools (default: all), building up to JOBS at once. Returns (tool, version, action, seconds)
    rows in the lock's order. A failed build fails the install once the others have ended (each built one is kept)."""
    lock = lock or lockmod.load()
    wanted = selected(names, lock, include_optional, tier)
    rows: dict[str, tuple[str, str, str, float]] = {}
    to_build = []
    for tool in wanted:
        start = time.monotonic()
        if _stamp(tool):
            rows[tool.name] = (tool.name, tool.version, "up to date", 0.0)
            continue
        reused = {b: _on_path(b, tool) for b in tool.packages}
        if all(reused.values()):
            _write_stamp(tool, {b: str(p) for b, p in reused.items()}, source="PATH")
            rows[tool.name] = (tool.name, tool.version, "reused from PATH", time.monotonic() - start)
            continue
        to_build.append(tool)

    def build(tool: lockmod.Tool) -> tuple[str, str, str, float]:
        start = time.monotonic()
        message = f"building {tool.name} {tool.version} ({', '.join(tool.packages)}) from {tool.module}"
        with progress.step(message, spinner=False):  # builds run side by side
            binaries = _build(tool)
        seconds = time.monotonic() - start
        _write_stamp(tool, binaries, source="go build", seconds=seconds)
        return (tool.name, tool.version, "built", seconds)

    failures: list[BaseException] = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(build, tool): tool for tool in to_build}
        for future in concurrent.futures.as_completed(futures):
            try:
                rows[futures[future].name] = future.result()
            except BaseException as err:  # noqa: BLE001 - raised below, once every build has ended
                failures.append(err)
    if failures:
        raise failures[0]
    link_into_venv(lock)
    return [rows[t.name] for t in wanted]


# The pinned CLIs a user runs by hand (the README's `helm install`, `kubectl apply -k examples/`): linked into
# the venv's bin, so an activated venv (or .venv/bin/helm) runs the pinned build and not whatever PATH has.
USER_BINARIES = ("helm", "helm3", "kustomize", "kubectl", "kubeconform", "kind", "crane")


def venv_bin() -> Path | None:
    """The bin folder of the virtualenv trainstack runs from; None outside one."""
    return Path(sys.prefix) / "bin" if sys.prefix != sys.base_prefix else None


def link_into_venv(lock: lockmod.Lock | None = None, bin_dir: Path | None = None) -> list[Path]:
    """Link each installed pinned USER_BINARIES into bin_dir (default: the venv's bin); a file there that is
    not such a link is left alone. Returns the links made or renewed."""
    target = bin_dir or venv_bin()
    if target is None or not target.is_dir():
        return []
    lock = lock or lockmod.load()
    made = []
    for binary in USER_BINARIES:
        try:
            tool = lock.tool_for_binary(binary)
        except UserError:  # not in this lock
            continue
        stamp = _stamp(tool)
        pinned = Path(stamp["binaries"][binary]) if stamp else None
        link = target / binary
        if pinned is None or not pinned.is_file() or (link.exists() and not link.is_symlink()):
            continue
        if link.is_symlink() and link.resolve() == pinned.resolve():
            continue
        tmp = target / f".{binary}.trainstack-link"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(pinned)
        os.replace(tmp, link)
        made.append(link)
    return made


def _write_stamp(tool: lockmod.Tool, binaries: dict[str, str], source: str, seconds: float = 0.0) -> None:
    target = tool_dir(tool)
    target.mkdir(parents=True, exist_ok=True)
    stamp = {"module": tool.module, "version": tool.version, "binaries": binaries, "source": source,
             "seconds": round(seconds, 1), "recipe": _recipe(tool)}
    tmp = target / (STAMP + ".tmp")
    tmp.write_text(json.dumps(stamp, indent=2, sort_keys=True))
    os.replace(tmp, target / STAMP)


def bin_dir_env(lock: lockmod.Lock | None = None) -> dict[str, str]:
    """An environment whose PATH puts every installed pinned tool first (for helm/kustomize)."""
    lock = lock or lockmod.load()
    dirs = []
    for row in status(lock):
        if row.status != "missing":
            d = str(Path(row.path).parent)
            if d not in dirs:
                dirs.append(d)
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([*dirs, env.get("PATH", "")])
    return env
