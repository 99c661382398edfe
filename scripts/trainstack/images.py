"""Images for the local cluster, built here from pinned sources and pushed to its registry.

No image registry upstream is reachable, so every image a real node runs is built from what the
lock pins, with the pinned `crane`, into the cluster's own registry (the "mirror"):

- `pause`: upstream's pause.c from the pinned k8s.io/kubernetes module, `gcc -static`, as upstream's
  build does (build/pause/Makefile);
- the Trainer, JobSet and LWS controllers and CoreDNS: the pinned tool-cache binaries on an empty
  base, non-root (65532), with upstream's entrypoint (`/manager`, `/coredns`); they keep the lock's
  repository and tag, so `global.imageRegistry` alone points a chart install at them;
- `python`: a Debian root filesystem (`mmdebstrap` minbase, the host's apt sources) with python3;
- `torch-cpu`: that root filesystem as its base layer, plus the lock's torch and the CPU part of
  its requirements from the wheel cache `smoke install` keeps, and `torchrun` on PATH;
- `jax-cpu`, `xgboost-cpu` (`kind: python`): that root filesystem plus exactly the entry's pinned
  PyPI packages, under the JAX and XGBoost runtimes' own repository and tag (`image:`);
- `mlx-cpu` (`kind: python` with `debianPackages` and `setup: mpi`): the root filesystem with OpenMPI
  and an SSH server too, set up as Trainer's MPI runtimes expect (`MPI_SETUP`), plus MLX for CPU;
- `mlflow` (`kind: python`): the tracking server, the lock's `tracking.server` packages under MLflow's
  own repository and tag. The training images also carry the lock's `tracking.client` (`trackingClient`).

Every Debian-based image has the default command its lock entry's `cmd` names, as its upstream
counterpart has one, so a TrainJob that sets no command runs it rather than failing to start.

Each image carries a label with the hash of its inputs; a build whose image in the registry has
that label already is skipped, so a warm run pushes nothing. The registry's storage lives in the
trainstack cache and outlives clusters.

Layers (written by imagelayers.py) are zstd-compressed (`application/vnd.oci.image.layer.v1.tar+zstd`,
which containerd 2 unpacks natively) rather than gzip: decompressing the torch image's 4.2 GB takes a
node about a seventh of gzip's CPU (0.8 s against 5.2 s a GB here), and the build compresses on every
core.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import imagelayers, paths, proc, progress, tools, trainenv
from . import lock as lockmod
from .errors import UserError
from .jsontypes import dig

KEY_LABEL = "trainstack.io/build-key"
MIRROR = "localhost:5000"


def spec(name: str, lock: lockmod.Lock) -> dict[str, Any]:
    entry = lock.get("builtImages", name)
    if not isinstance(entry, dict):
        raise UserError(f"{lock.path}: lock entry 'builtImages.{name}' must be a mapping")
    return entry


def repository_tag(name: str, lock: lockmod.Lock) -> tuple[str, str]:
    """(repository, tag): an upstream image's own (`image:` names its lock entry), else the entry's."""
    entry = spec(name, lock)
    if entry.get("image"):
        image = lock.image(str(entry["image"]))
        return image.repository, image.tag
    if entry.get("kind") == "torch":
        return str(entry["repository"]), f"{_torch_wheel(lock)[1]}-{_debian(spec(str(entry['base']), lock))[0]}"
    if entry.get("kind") == "debian" and "repository" in entry and "tag" not in entry:
        return str(entry["repository"]), _debian(entry)[0]
    if entry.get("kind") == "python" and "repository" in entry and "tag" not in entry and entry.get("pythonPackages"):
        # <the first package's version>-<suite>: the lock says each version once
        version = str(entry["pythonPackages"][0]).split("==")[-1]
        return str(entry["repository"]), f"{version}-{_debian(_base_entry(name, lock))[0]}"
    if "repository" not in entry or "tag" not in entry:
        raise UserError(f"{lock.path}: lock entry 'builtImages.{name}' needs `image:`, or `repository:` and `tag:`")
    return str(entry["repository"]), str(entry["tag"])


def _debian(entry: dict[str, Any]) -> tuple[str, list[str]]:
    """A `kind: debian` entry's (suite, packages)."""
    return str(entry["debianSuite"]), [str(p) for p in entry.get("debianPackages", [])]


def _base_entry(name: str, lock: lockmod.Lock) -> dict[str, Any]:
    """The Debian root filesystem a `kind: python`/`torch` entry installs into: its `base` entry, with the
    entry's own `debianPackages` added and its `setup` (e.g. `mpi`)."""
    entry = spec(name, lock)
    base = dict(spec(str(entry["base"]), lock))
    base["debianPackages"] = [*base.get("debianPackages", []), *entry.get("debianPackages", [])]
    if entry.get("setup"):
        base["setup"] = entry["setup"]
    return base


def _torch_wheel(lock: lockmod.Lock) -> tuple[Path, str]:
    """The cached torch wheel the image installs, and its version."""
    specifier = trainenv.pins(lock)["torch"]
    wheel = trainenv._cached_wheel("torch", specifier)
    if wheel is None:
        raise UserError(f"no torch{specifier} wheel in {trainenv.wheel_dir()}",
                        "run 'trainstack smoke install' (or 'make setup') first")
    return wheel, wheel.name.split("-")[1].replace("%2B", "+").split("+")[0]


def reference(name: str, lock: lockmod.Lock, registry: str = MIRROR) -> str:
    repository, tag = repository_tag(name, lock)
    return f"{registry}/{repository}:{tag}"


def names(lock: lockmod.Lock) -> list[str]:
    return list(lock.get("builtImages"))


def cache_dir() -> Path:
    return paths.cache_dir() / "images"


def record_path() -> Path:
    """What each image's last build took and weighs (read by `trainstack bench e2e`)."""
    return cache_dir() / "record.json"


def _record(built: Built) -> None:
    path = record_path()
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        record = {}
    entry = record.get(built.name, {})
    entry.update({"reference": built.reference, "compressed_bytes": built.size, "source": built.source})
    if built.action == "built":
        entry["build_seconds"] = round(built.seconds, 1)
    record[built.name] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, sort_keys=True))


# -- recipes ----------------------------------------------------------------------------------------


@dataclass
class Recipe:
    """What one image is made of: its input key, layers (built lazily) and config."""

    name: str
    key: str
    layers: Any  # callable(workdir) -> list[Path]
    entrypoint: list[str]
    user: str
    env: dict[str, str]
    source: str
    workdir: str = ""
    cmd: list[str] = field(default_factory=list)  # the default command (the lock entry's `cmd`)


def _k8s_module_zip(lock: lockmod.Lock) -> Path:
    tool = lock.tool("kubernetes")
    return Path(tools.module_info(tool.module, tool.version)["Zip"])


def pause_recipe(lock: lockmod.Lock) -> Recipe:
    tool = lock.tool("kubernetes")
    zip_path = _k8s_module_zip(lock)
    prefix = f"{tool.module}@{tool.version}/build/pause/"
    with zipfile.ZipFile(zip_path) as archive:
        source = archive.read(prefix + "linux/pause.c")
        makefile = archive.read(prefix + "Makefile").decode()
    tag = next(ln.split("?=")[1].strip() for ln in makefile.splitlines() if ln.startswith("TAG ?="))
    key = hashlib.sha256(source + tag.encode() + b"gcc -Os -Wall -Werror -static").hexdigest()

    def layers(work: Path) -> list[Path]:
        if not shutil.which("gcc"):
            raise UserError("building the pause image needs gcc", "install gcc (Debian package gcc)")
        src = work / "pause.c"
        src.write_bytes(source)
        binary = work / "pause"
        cmd = ["gcc", "-Os", "-Wall", "-Werror", "-static", f"-DVERSION=v{tag}-trainstack", "-o", str(binary),
               str(src)]
        result = proc.run(cmd, check=False)
        if result.returncode != 0:
            raise UserError(f"gcc could not build pause.c: {result.stderr.strip()[-300:]}")
        return [imagelayers.binary_layer(binary, "/pause", work / "pause.tar")]

    return Recipe("pause", key, layers, ["/pause"], "65535:65535", {},
                  f"{tool.module}@{tool.version} build/pause/linux/pause.c (pause {tag})")


def binary_recipe(name: str, lock: lockmod.Lock) -> Recipe:
    entry = spec(name, lock)
    binary = tools.require(str(entry["binary"]), lock)
    target = str(entry["entrypoint"][0])
    key = hashlib.sha256(json.dumps(entry, sort_keys=True).encode() + imagelayers.sha256_file(binary).encode()).hexdigest()
    tool = lock.tool_for_binary(str(entry["binary"]))
    return Recipe(name, key, lambda work: [imagelayers.binary_layer(binary, target, work / f"{name}.tar")],
                  [str(a) for a in entry["entrypoint"]], str(entry.get("user", "65532:65532")), {},
                  f"{tool.module}@{tool.version} ({entry['binary']})")


# Trainer's MPI runtimes (files/runtimes/mlx-distributed.yaml, deepspeed-distributed.yaml, as upstream's MPI
# images and the MPI Operator's have it): the non-root user `mpiuser` (uid 1000, the runtimes' runAsUser), whose
# ~/.ssh the MPI plugin mounts its SSH Secret on (sshAuthMountPath); the node pods run
# `sshd -De -f /home/mpiuser/.sshd_config` as that user on port 2222 with the mounted key as host key; the
# launcher's mpirun reaches them with ssh on that port without a known-hosts prompt. MLX finds OpenMPI by
# dlopen("libmpi.so"), which only Debian's -dev package links: a link to the runtime library stands in.
MPI_USER, MPI_UID, MPI_SSH_PORT = "mpiuser", 1000, 2222
MPI_SETUP = [
    f'chroot "$1" useradd --create-home --uid {MPI_UID} --user-group --shell /bin/bash {MPI_USER}',
    (f"printf 'Port {MPI_SSH_PORT}\\nPidFile /home/{MPI_USER}/sshd.pid\\nHostKey /home/{MPI_USER}/.ssh/id_rsa\\n"
     f"StrictModes no\\n' > \"$1/home/{MPI_USER}/.sshd_config\""),
    f'chroot "$1" chown {MPI_USER}:{MPI_USER} /home/{MPI_USER}/.sshd_config',
    (f"printf 'Host *\\n  Port {MPI_SSH_PORT}\\n  StrictHostKeyChecking no\\n  UserKnownHostsFile /dev/null\\n"
     f"  LogLevel ERROR\\n' > \"$1/etc/ssh/ssh_config.d/mpi.conf\""),
    'ln -s libmpi.so.40 "$1/usr/lib/x86_64-linux-gnu/libmpi.so"',
    'rm -f "$1"/etc/ssh/ssh_host_*',  # the package's host keys: never in an image (sshd uses the mounted key)
]
SETUPS = {"mpi": MPI_SETUP}


def _debian_base(entry: dict[str, Any]) -> tuple[str, Any]:
    """(key, build) of a `kind: debian` entry's root filesystem: mmdebstrap of its suite and
    packages from this host's apt sources, then its `setup`'s hooks, as one tar cached across builds."""
    suite, packages = _debian(entry)
    sources = _apt_sources()
    setup = str(entry.get("setup", ""))
    if setup and setup not in SETUPS:
        raise UserError(f"lock entry setup {setup!r} is not one of {', '.join(sorted(SETUPS))}")
    hooks = SETUPS.get(setup, [])
    key_parts: list[Any] = [suite, packages, sources.read_text(), *([hooks] if hooks else [])]
    base_key = hashlib.sha256(json.dumps(key_parts).encode()).hexdigest()[:16]

    def build() -> Path:
        base = cache_dir() / f"debian-{suite}-{base_key}.tar"
        if not base.is_file():
            if not shutil.which("mmdebstrap"):
                raise UserError("building the Debian images needs mmdebstrap", "run 'trainstack node prereqs'")
            with progress.step(f"mmdebstrap {suite} (minbase + {', '.join(packages)})"):
                tmp = base.with_suffix(".tmp")
                cmd = ["mmdebstrap", "--quiet", "--variant=minbase", f"--include={','.join(packages)}",
                       "--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/man/*",
                       "--dpkgopt=path-exclude=/usr/share/locale/*",
                       *(f"--customize-hook={hook}" for hook in hooks), "--format=tar", suite, str(tmp), str(sources)]
                result = proc.run(cmd, check=False)
                if result.returncode != 0:
                    raise UserError(f"mmdebstrap failed: {(result.stderr or result.stdout).strip()[-300:]}")
                tmp.rename(base)
        return base

    return base_key, build


# What the Debian images run with: Python unbuffered, HOME writable by any user.
DEBIAN_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "PYTHONUNBUFFERED": "1", "HOME": "/tmp"}
SBIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def debian_recipe(name: str, lock: lockmod.Lock) -> Recipe:
    """A `kind: debian` image: its root filesystem, plus a layer with each of its `binaries` (tool-cache binary
    -> path in the image; the first is the entrypoint)."""
    entry = spec(name, lock)
    base_key, build = _debian_base(entry)
    suite, packages = _debian(entry)
    placed = {str(binary): str(target) for binary, target in (entry.get("binaries") or {}).items()}
    found = {binary: tools.require(binary, lock) for binary in placed}
    key = hashlib.sha256(f"{base_key} debian".encode() + "".join(
        f" {placed[b]}={imagelayers.sha256_file(p)}" for b, p in sorted(found.items())).encode()).hexdigest()

    def layers(work: Path) -> list[Path]:
        return [build(), *(imagelayers.binary_layer(path, placed[binary], work / f"{binary}.tar")
                           for binary, path in found.items())]

    what = f"Debian {suite} (mmdebstrap minbase + {', '.join(packages)})"
    env = DEBIAN_ENV
    if placed:  # a system daemon's image (kube-proxy): its tools (iptables, conntrack) are in the sbin folders
        what += " + " + ", ".join(f"{lock.tool_for_binary(b).module}@{lock.tool_for_binary(b).version} ({b})"
                                  for b in placed)
        env = {**DEBIAN_ENV, "PATH": SBIN_PATH}
        key = hashlib.sha256(f"{key} PATH={SBIN_PATH}".encode()).hexdigest()
    return Recipe(name, key, layers, list(placed.values())[:1], str(entry.get("user", "1000:1000")), env, what)


def _ensure_wheels(requirements: list[str]) -> None:
    """Download into the wheel cache (once) what installing `requirements` offline would lack."""
    # --ignore-installed: the question is whether the wheel cache has them, not this venv (which
    # may have numpy already, leaving the cache without it on a fresh machine)
    if requirements and trainenv._install_offline("--dry-run", "--ignore-installed", *requirements).returncode != 0:
        trainenv._download(*requirements)


def _packages_line(requirements: list[str], shown: int = 6) -> str:
    """REQUIREMENTS for a progress line: all of a short list, else the first few and how many more."""
    if len(requirements) <= shown:
        return " ".join(requirements)
    return f"{' '.join(requirements[:shown])} and {len(requirements) - shown} more"


def python_recipe(name: str, lock: lockmod.Lock) -> Recipe:
    """A `kind: python` image (exactly its pinned pythonPackages over its Debian base) or `kind: torch`
    (the lock's torch wheel and its CPU requirements, plus pythonPackages, and `torchrun`)."""
    entry = spec(name, lock)
    base_entry = _base_entry(name, lock)
    extra = [str(r) for r in entry.get("pythonPackages", [])]
    # MLflow's client (lock tracking.client), resolved with the image's own packages in one install
    client = [str(r) for r in entry.get("trackingClient", [])]
    installs: list[tuple[list[str], bool]] = []
    launchers: dict[str, str] = {}
    if entry.get("kind") == "torch":
        wheel, _ = _torch_wheel(lock)
        chosen = [*trainenv.cpu_requirements(trainenv.wheel_requirements(wheel)), *extra, *client]
        installs = [([f"torch=={wheel.name.split('-')[1]}"], True), (chosen, False)]
        launchers = {"torchrun": "torch.distributed.run"}
        inputs = f"{wheel.name} {' '.join(chosen)}"
        what = f"{wheel.name} (CPU requirements)" + (" + MLflow's client" if client else "")
    else:
        if not extra:
            raise UserError(f"{lock.path}: lock entry 'builtImages.{name}' (kind python) lists no pythonPackages")
        installs = [([*extra, *client], False)]
        inputs = " ".join([*extra, *client])
        what = _packages_line(extra) + (" + MLflow's client" if client else "")
    suite, _ = _debian(base_entry)
    base_key, build_base = _debian_base(base_entry)
    own = [str(p) for p in entry.get("debianPackages", [])]
    if own:
        what = f"{', '.join(own)}{' (' + str(entry['setup']) + ')' if entry.get('setup') else ''} + {what}"
    key = hashlib.sha256(f"{base_key} {inputs}".encode()).hexdigest()

    def layers(work: Path) -> list[Path]:
        base = build_base()
        _ensure_wheels([*extra, *client])  # into the wheel cache, once
        with progress.step(f"installing {what} into the image"):
            return [base, imagelayers.python_layer(work, installs, launchers)]

    # /workspace is the working directory, as in upstream's torch and xgboost images.
    return Recipe(name, hashlib.sha256(f"{key} workdir=/workspace bytecode={imagelayers.BYTECODE}".encode()).hexdigest(), layers, [],
                  str(entry.get("user", "1000:1000")), DEBIAN_ENV, f"Debian {suite} (mmdebstrap) + {what}",
                  workdir="/workspace")


def _apt_sources() -> Path:
    for candidate in (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list")):
        if candidate.is_file():
            return candidate
    found = sorted(Path("/etc/apt/sources.list.d").glob("*.sources"))
    if not found:
        raise UserError("no apt sources on this host for mmdebstrap", "configure /etc/apt/sources.list.d")
    return found[0]


def recipe(name: str, lock: lockmod.Lock) -> Recipe:
    kind = spec(name, lock).get("kind", "binary")
    if kind == "pause":
        rec = pause_recipe(lock)
    elif kind in ("torch", "python"):
        rec = python_recipe(name, lock)
    elif kind == "debian":
        rec = debian_recipe(name, lock)
    else:
        rec = binary_recipe(name, lock)
    rec.cmd = [str(a) for a in spec(name, lock).get("cmd", [])]
    config = f" cmd={json.dumps(rec.cmd)}" if rec.cmd else ""  # (images without one keep their key)
    rec.key = hashlib.sha256(f"{rec.key} layers=zstd -{imagelayers.ZSTD_LEVEL}{config}".encode()).hexdigest()
    return rec


# -- build + push -----------------------------------------------------------------------------------


@dataclass
class Built:
    name: str
    reference: str
    action: str  # built | up to date
    seconds: float
    size: int  # compressed bytes in the registry
    source: str


# The cache-wide lock (paths.exclusive) held while an image is built and pushed, and while the registry's
# storage is garbage-collected (cluster/node.py).
REGISTRY_LOCK = "registry"


class Builder:
    """Runs crane inside the cluster's network namespace, where the registry listens."""

    def __init__(self, enter_net: list[str], lock: lockmod.Lock) -> None:
        self.enter = enter_net
        self.lock = lock
        self.crane = str(tools.require("crane", lock))

    def crane_run(self, *args: str, timeout: float = 900) -> proc.CompletedProcess:
        return proc.run([*self.enter, self.crane, *args], check=False, timeout=timeout)

    def crane_ok(self, *args: str, timeout: float = 900) -> str:
        result = self.crane_run(*args, timeout=timeout)
        if result.returncode != 0:
            raise UserError(f"crane {args[0]} failed: {(result.stderr or result.stdout).strip()[-300:]}")
        return result.stdout

    def current_key(self, ref: str) -> str | None:
        result = self.crane_run("config", ref, timeout=60)
        if result.returncode != 0:
            return None
        try:
            return dig(json.loads(result.stdout), "config", "Labels", default={}).get(KEY_LABEL)
        except ValueError:
            return None

    def digest(self, ref: str) -> str | None:
        """The manifest digest the registry serves for `ref`, or None when it has no such tag."""
        result = self.crane_run("digest", ref, timeout=60)
        return result.stdout.strip() if result.returncode == 0 else None

    def size(self, ref: str) -> int:
        try:
            manifest = json.loads(self.crane_ok("manifest", ref, timeout=60))
        except (UserError, ValueError):
            return 0
        return sum(int(layer.get("size", 0)) for layer in manifest.get("layers", []))

    def ensure(self, name: str) -> Built:
        """NAME's image in the registry, built and pushed unless it is there under its build key. One image
        is checked or built at a time across processes (REGISTRY_LOCK): clusters started together share the
        registry's storage and the build folders, and its garbage collection must not run during a push."""
        with paths.exclusive(REGISTRY_LOCK):
            return self._ensure(name)

    def _ensure(self, name: str) -> Built:
        start = time.monotonic()
        rec = recipe(name, self.lock)
        ref = reference(name, self.lock)
        if self.current_key(ref) == rec.key:
            built = Built(name, ref, "up to date", time.monotonic() - start, self.size(ref), rec.source)
            _record(built)
            return built
        work = cache_dir() / "work" / name
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        with progress.step(f"building image {ref} from {rec.source}"):
            layers = []
            for i, layer in enumerate(rec.layers(work)):
                layers.append(imagelayers.compress_layer(layer, work / f"layer-{i}.tar.zst"))
                if layer.is_relative_to(work):  # scratch (the Debian base's tar is a cache): the disk's peak
                    layer.unlink()
            self.crane_ok("append", "--oci-empty-base", *[a for layer in layers for a in ("-f", str(layer))],
                          "-t", ref)
            mutate = ["mutate", ref, "--set-platform", "linux/amd64", "-u", rec.user, "-l", f"{KEY_LABEL}={rec.key}",
                      "-l", f"org.opencontainers.image.source={rec.source.replace(',', ';')}", "-t", ref]  # (crane splits at commas)
            if rec.entrypoint:
                mutate += ["--entrypoint", ",".join(rec.entrypoint)]
            if rec.cmd:
                mutate += ["--cmd", ",".join(rec.cmd)]
            if rec.workdir:
                mutate += ["-w", rec.workdir]
            for key, value in rec.env.items():
                mutate += ["-e", f"{key}={value}"]
            self.crane_ok(*mutate)
        shutil.rmtree(work, ignore_errors=True)
        built = Built(name, ref, "built", time.monotonic() - start, self.size(ref), rec.source)
        _record(built)
        return built

    def ensure_all(self, wanted: list[str] | None = None) -> list[Built]:
        return [self.ensure(name) for name in (wanted or names(self.lock))]
