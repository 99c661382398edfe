"""Installs the lock's `python.train` packages (torch, the Kubeflow SDK) into this interpreter's environment.

Why not plain `pip install torch`: on Linux x86-64 the torch wheel requires its whole CUDA stack
(about 2.8 GB of wheels, 5.3 GB installed), although CPU work never opens most of it. `import
torch` needs the libraries that libtorch links directly (cudart, cublas, cudnn, nccl, ...), but
triton, cuda-bindings, cusolver and nvtx are only opened on first GPU use; the "cpu" profile
leaves those out (about 2.3 GB of wheels, 4.1 GB installed). If an import check then fails (a
later torch may link more), the full set is installed instead. `--full` installs everything.

Every wheel is kept in the trainstack cache (pip's own cache cannot be relied on), so a second
install, e.g. after `make clean`, needs no network. A package already importable at the locked
lower bound is left alone, so calling this from `make setup` costs nothing once done.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import sys
import time
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from . import lock as lockmod
from . import paths, proc, progress
from .errors import UserError, output_line

# Requirements of the torch wheel that CPU use never loads (checked by importing torch afterwards).
LAZY_REQUIREMENTS = frozenset({"triton", "cuda-bindings"})
# Extras of the cuda-toolkit requirement (torch 2.10+) and wheel name prefixes (older lines) likewise.
LAZY_CUDA_PARTS = ("cusolver", "nvtx")
PROFILES = ("cpu", "full")


@dataclass
class Row:
    package: str
    requirement: str
    version: str
    action: str
    seconds: float


def wheel_dir() -> Path:
    return paths.cache_dir() / "wheels" / "python-train"


def pins(loaded: lockmod.Lock | None = None) -> dict[str, str]:
    """The lock's python.train section: {package: specifier}."""
    loaded = loaded or lockmod.load()
    section = loaded.get("python", "train")
    if not isinstance(section, dict) or not all(isinstance(v, str) for v in section.values()):
        raise UserError(f"{loaded.path}: python.train must map package names to version specifiers")
    return dict(section)


# ---- versions -------------------------------------------------------------------------------------

def _version(text: str) -> Version:
    try:
        return Version(text.strip())
    except InvalidVersion:
        raise UserError(f"cannot read version {text!r}") from None


def satisfies(version: str, specifier: str) -> bool:
    """Whether `version` (e.g. '2.15.0+cu132') meets `specifier` (e.g. '>=2.5' or '>=0.5.0,<1'), by PEP 440."""
    try:
        wanted = SpecifierSet(specifier)
    except InvalidSpecifier:
        raise UserError(f"unsupported version specifier {specifier!r} (PEP 440, e.g. '>=2.5,<3')") from None
    return wanted.contains(_version(version), prereleases=True)


def installed_version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


# ---- torch's requirements -------------------------------------------------------------------------

_REQ = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(.*)$")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_requirements(wheel: Path) -> list[str]:
    """Requires-Dist lines of a wheel, without the ones that only apply to an extra."""
    with zipfile.ZipFile(wheel) as archive:
        meta = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(meta).decode()
    lines = [ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("Requires-Dist:")]
    return [ln for ln in lines if "extra ==" not in ln.replace("extra==", "extra ==")]


def cpu_requirements(requirements: list[str]) -> list[str]:
    """torch's requirements minus the parts of the CUDA stack that only GPU use loads."""
    kept = []
    for requirement in requirements:
        match = _REQ.match(requirement)
        if not match:
            kept.append(requirement)
            continue
        name, extras, rest = _norm(match.group(1)), match.group(2), match.group(3)
        if name in LAZY_REQUIREMENTS or any(name.startswith(f"nvidia-{part}") for part in LAZY_CUDA_PARTS):
            continue
        if extras:
            wanted = [e.strip() for e in extras[1:-1].split(",") if e.strip() not in LAZY_CUDA_PARTS]
            extras = f"[{','.join(wanted)}]" if wanted else ""
        kept.append(f"{match.group(1)}{extras or ''}{rest}")
    return kept


def _cached_wheel(package: str, specifier: str) -> Path | None:
    """The newest cached wheel of `package` for this interpreter that meets `specifier`."""
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    best: tuple[Version, Path] | None = None
    for wheel in wheel_dir().glob(f"{package}-*.whl"):
        parts = wheel.name.split("-")
        if len(parts) < 5 or parts[2] != tag:
            continue
        version = parts[1].replace("%2B", "+")
        if satisfies(version, specifier) and (best is None or _version(version) > best[0]):
            best = (_version(version), wheel)
    return best[1] if best else None


# ---- pip ------------------------------------------------------------------------------------------

def _pip(*args: str, python: str | None = None) -> proc.CompletedProcess:
    """pip ARGS with PYTHON (default: this interpreter)."""
    return proc.run([python or sys.executable, "-m", "pip", "--disable-pip-version-check", *args], check=False,
                    what="pip")


def _last_line(result: proc.CompletedProcess) -> str:
    return output_line(result.stderr + result.stdout, markers=("ERROR",))


def _download(*requirements: str, no_deps: bool = False) -> None:
    wheel_dir().mkdir(parents=True, exist_ok=True)
    args = ["download", "--only-binary=:all:", "--dest", str(wheel_dir()), "--find-links", str(wheel_dir())]
    result = _pip(*args, *(["--no-deps"] if no_deps else []), *requirements)
    if result.returncode != 0:
        raise UserError(f"could not download {' '.join(requirements)}: {_last_line(result)}",
                        "check the network to the Python package index")


def wheel(package: str, version: str) -> Path:
    """The wheel of PACKAGE==VERSION alone (no dependencies), from the wheel cache; downloaded into it first
    when missing. For reading a pinned package's source, not for installing it."""
    stem = f"{re.sub(r'[-_.]+', '_', package).lower()}-{version}-"
    found = sorted(p for p in wheel_dir().glob("*.whl") if p.name.lower().startswith(stem))
    if not found:
        _download(f"{package}=={version}", no_deps=True)
        found = sorted(p for p in wheel_dir().glob("*.whl") if p.name.lower().startswith(stem))
    if not found:
        raise UserError(f"no wheel of {package}=={version} in {wheel_dir()} after downloading it")
    return found[-1]


def _uv() -> Path | None:
    """The uv beside this interpreter (`make venv` installs the lock's pinned one into the venv), if any."""
    found = Path(sys.executable).parent / "uv"
    return found if found.is_file() and os.access(found, os.X_OK) else None


def _install_offline(*requirements: str, no_deps: bool = False, python: str | None = None) -> proc.CompletedProcess:
    """Install from the wheel cache alone, into PYTHON's environment (default: this one). With the venv's uv: it
    unpacks a wheel into its own cache once and links it from there, and compiles the bytecode at install on every
    CPU. Python writes no bytecode where PYTHONDONTWRITEBYTECODE is set (as on the machines the suite runs on),
    so without it every process compiles what it imports again: `import torch` took 3.3 CPU-s rather than 2.1,
    `import mlflow` 2.5 rather than 1.0. Without uv (trainstack installed some other way), pip."""
    deps = ["--no-deps"] if no_deps else []
    uv = _uv()
    if uv is not None:
        return proc.run([str(uv), "pip", "install", "--python", python or sys.executable, "--no-index",
                         "--find-links", str(wheel_dir()), "--quiet", "--compile-bytecode", *deps, *requirements],
                        check=False, what="uv pip install")
    return _pip("install", "--no-index", "--find-links", str(wheel_dir()), "--quiet", *deps, *requirements,
                python=python)


def _cached_install(*requirements: str, no_deps: bool = False) -> None:
    """Install from the wheel cache; download into it first when something is missing."""
    if _install_offline(*requirements, no_deps=no_deps).returncode == 0:
        return
    _download(*requirements, no_deps=no_deps)
    result = _install_offline(*requirements, no_deps=no_deps)
    if result.returncode != 0:
        raise UserError(f"could not install {' '.join(requirements)}: {_last_line(result)}")


def torch_import_check(python: str | None = None) -> proc.CompletedProcess:
    code = ("import warnings; warnings.filterwarnings('ignore'); import torch, torch.distributed as d; "
            "assert d.is_available(); torch.nn.Linear(2, 1)(torch.ones(1, 2)).sum().backward(); "
            "print(torch.__version__)")
    return proc.run([python or sys.executable, "-c", code], check=False)


def _environment_key(path: list[str] | None = None) -> str:
    """Every distribution installed in this interpreter's environment (or on PATH: name, version,
    RECORD's size and mtime): a changed, added or removed package changes it."""
    rows = []
    for dist in (metadata.distributions(path=path) if path is not None else metadata.distributions()):
        record = getattr(dist, "_path", None)
        stat = (Path(record) / "RECORD").stat() if record and (Path(record) / "RECORD").is_file() else None
        rows.append(f"{dist.metadata['Name']} {dist.version} {stat.st_size if stat else ''} "
                    f"{stat.st_mtime_ns if stat else ''}")
    return hashlib.sha256("\n".join([sys.executable, *sorted(rows)]).encode()).hexdigest()


def torch_importable() -> bool:
    """torch imports and trains a step here (torch_import_check, seconds on two cores); remembered in
    the environment until any of its packages changes, so a warm `make setup` does not pay it again."""
    stamp = Path(sys.prefix) / ".trainstack-torch-import-ok"
    key = _environment_key()
    try:
        if stamp.read_text() == key:
            return True
    except OSError:
        pass
    if torch_import_check().returncode != 0:
        return False
    with contextlib.suppress(OSError):
        stamp.write_text(key)
    return True


def _install_torch(specifier: str, profile: str) -> str:
    wheel = _cached_wheel("torch", specifier)
    if wheel is None:
        with progress.step(f"downloading torch{specifier} (the wheel alone is about 0.5 GB)"):
            _download(f"torch{specifier}", no_deps=True)
        wheel = _cached_wheel("torch", specifier)
        if wheel is None:
            raise UserError(f"no torch{specifier} wheel for Python {sys.version_info.major}."
                            f"{sys.version_info.minor} in {wheel_dir()}")
    version = wheel.name.split("-")[1].replace("%2B", "+")
    requirements = wheel_requirements(wheel)
    chosen = cpu_requirements(requirements) if profile == "cpu" else requirements
    with progress.step(f"installing torch {version} ({profile} profile: {len(chosen)} requirements)"):
        _cached_install(f"torch=={version}", no_deps=True)
        _cached_install(*chosen)
    check = torch_import_check()
    if check.returncode != 0 and profile == "cpu":
        progress.info(f"torch {version} does not import with the cpu profile ({_last_line(check)}); "
                      "installing its full requirements")
        with progress.step(f"installing torch {version}'s full requirements"):
            _cached_install(*requirements)
        check = torch_import_check()
    if check.returncode != 0:
        raise UserError(f"torch {version} was installed but does not import: {_last_line(check)}")
    return version


def ensure(profile: str = "cpu", loaded: lockmod.Lock | None = None) -> list[Row]:
    """Install each python.train package that is missing or below its locked bound (idempotent)."""
    if profile not in PROFILES:
        raise UserError(f"unknown torch profile {profile!r} (choose from {', '.join(PROFILES)})")
    rows = []
    for package, specifier in pins(loaded).items():
        started = time.monotonic()
        have = installed_version(package)
        usable = have is not None and satisfies(have, specifier)
        if usable and package == "torch":
            usable = torch_importable()
        if usable:
            rows.append(Row(package, specifier, have or "", "up to date", 0.0))
            continue
        if package == "torch":
            version = _install_torch(specifier, profile)
        else:
            with progress.step(f"installing {package}{specifier}"):
                _cached_install(f"{package}{specifier}")
            version = installed_version(package) or "?"
        rows.append(Row(package, specifier, version, "installed", time.monotonic() - started))
    return rows


# ---- a virtual environment of pinned packages ------------------------------------------------------

def venv_dir() -> Path:
    return paths.cache_dir() / "venvs"


def package_venv(name: str, requirements: list[str]) -> Path:
    """The python of a virtual environment under the trainstack cache holding exactly `requirements`
    (e.g. a built image's pinned pythonPackages), installed from the wheel cache, downloading into it
    what it lacks. Kept, and reused while this interpreter and the requirements stay the same."""
    uv = _uv()
    # how it is installed is part of the key: a venv pip made (no bytecode) is not reused once uv is there
    key = hashlib.sha256("\n".join([sys.version, *sorted(requirements), *(["uv --compile-bytecode"] if uv else [])])
                         .encode()).hexdigest()[:12]
    root = venv_dir() / f"{name}-{key}"
    python = root / "bin" / "python"
    stamp = root / ".trainstack-installed"
    if stamp.is_file() and python.exists():
        return python
    # one maker at a time (the e2e tier's groups may ask for the same venv at once): the others wait, then reuse it
    with paths.exclusive(f"venv-{root.name}"):
        if stamp.is_file() and python.exists():
            return python
        shutil.rmtree(root, ignore_errors=True)
        root.parent.mkdir(parents=True, exist_ok=True)
        made = proc.run([sys.executable, "-m", "venv", str(root)], check=False)
        if made.returncode != 0:
            raise UserError(f"could not create the virtual environment {root}: {_last_line(made)}")

        def install() -> proc.CompletedProcess:
            return _install_offline(*requirements, python=str(python))

        with progress.step(f"installing {', '.join(requirements)} into {root}"):
            if install().returncode != 0:
                _download(*requirements)
                result = install()
                if result.returncode != 0:
                    raise UserError(f"could not install {' '.join(requirements)} into {root}: {_last_line(result)}")
        stamp.write_text("\n".join(requirements) + "\n")
    return python
