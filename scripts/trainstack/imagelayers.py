"""How an image's layers are written: deterministic tars (owners root, times 0), zstd-compressed on every
core, and the Python layer (pinned wheels installed offline, compiled to bytecode) that images.py's
recipes put over a Debian base. Nothing here knows the lock or the registry."""

from __future__ import annotations

import hashlib
import io
import shutil
import sys
import tarfile
from pathlib import Path

from . import proc, trainenv
from .errors import UserError

# The zstd level of every layer (part of each image's build key: a change rebuilds the images).
ZSTD_LEVEL = 3
ZSTD_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar+zstd"
PYTHON_SITE = "usr/local/lib/python3.11/dist-packages"


def _tarinfo(name: str, size: int = 0, mode: int = 0o644, kind: bytes = tarfile.REGTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.type, info.mtime = size, mode, kind, 0
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def binary_layer(binary: Path, target: str, out: Path) -> Path:
    """A deterministic tar with `binary` at `/target` (and an empty /tmp)."""
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(_tarinfo("tmp", mode=0o1777, kind=tarfile.DIRTYPE))
        data = binary.read_bytes()
        tar.addfile(_tarinfo(target.lstrip("/"), len(data), 0o755), io.BytesIO(data))
    return out


def dir_layer(root: Path, out: Path, prefix: str = "") -> Path:
    """A tar of everything below `root` (paths below `prefix`), owners reset to root."""
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:

        def reset(info: tarfile.TarInfo) -> tarfile.TarInfo:
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mtime = 0
            return info

        for child in sorted(root.iterdir()):
            tar.add(child, arcname=f"{prefix}/{child.name}".lstrip("/"), filter=reset)
    return out


def compress_layer(layer: Path, out: Path) -> Path:
    """LAYER (a tar) zstd-compressed into OUT with the `zstd` CLI on every core; crane pushes a
    zstd file as it is, with the zstd layer media type."""
    if not shutil.which("zstd"):
        raise UserError("building the node's images needs zstd", "run 'trainstack node prereqs' (Debian package zstd)")
    result = proc.run(["zstd", "-q", "-f", "-T0", f"-{ZSTD_LEVEL}", "-o", str(out), str(layer)], check=False)
    if result.returncode != 0:
        raise UserError(f"zstd could not compress {layer.name}: {(result.stderr or result.stdout).strip()[-300:]}")
    return out


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


# The image's Python (Debian bookworm's 3.11) reads bytecode this interpreter writes when their versions
# match (one magic number per 3.x line); otherwise the image compiles at run time, as it did before.
BYTECODE = "unchecked-hash" if sys.version_info[:2] == (3, 11) else "none"


def compile_bytecode(target: Path) -> None:
    """Compile the modules under TARGET (the image's dist-packages) into __pycache__, so that a container
    imports torch from bytecode instead of compiling it on every start (its writes are lost with the
    container): 7 s against 2.5 s for `import torch` on this 2-core machine. `unchecked-hash` pyc files
    are used without comparing the source's mtime, which the layer resets to 0; the recorded file names
    are the image's paths, for tracebacks. A module that does not compile (a template, a file for another
    Python) is left to run time."""
    if BYTECODE == "none":
        return
    proc.run([sys.executable, "-m", "compileall", "-q", "-j", "0", "--invalidation-mode", BYTECODE,
              "-s", str(target), "-p", f"/{PYTHON_SITE}", str(target)], check=False, timeout=1800,
             what="python -m compileall")


def python_layer(work: Path, installs: list[tuple[list[str], bool]], launchers: dict[str, str]) -> Path:
    """One layer over the Debian python base: each (requirements, no_deps) of `installs` pip-installed
    offline from the wheel cache into dist-packages, the first install winning a name; a script in
    /usr/local/bin per launcher (name: module whose main() it runs); `python` for python3; and
    /workspace, writable by any user (the Kubeflow SDK writes its training script to the working
    directory, as upstream's images have it)."""
    site = work / "python-root"
    shutil.rmtree(site, ignore_errors=True)
    target = site / PYTHON_SITE
    for index, (reqs, no_deps) in enumerate(installs):
        out = work / f"pip-{index}"
        result = proc.run(
            [sys.executable, "-m", "pip", "--disable-pip-version-check", "install", "--quiet", "--no-index",
             "--find-links", str(trainenv.wheel_dir()), "--no-compile", "--target", str(out),
             *(["--no-deps"] if no_deps else []), *reqs], check=False)
        if result.returncode != 0:
            raise UserError(f"pip could not install {reqs[0]} into the image: "
                            f"{(result.stderr or result.stdout).strip()[-300:]}")
        for child in out.iterdir():
            if child.name == "bin":
                continue
            dest = target / child.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            if not dest.exists():
                shutil.move(str(child), dest)
    compile_bytecode(target)
    bindir = site / "usr/local/bin"
    bindir.mkdir(parents=True)
    for launcher, module in launchers.items():
        path = bindir / launcher
        path.write_text(f"#!/usr/bin/python3\nimport sys\nfrom {module} import main\nsys.exit(main())\n")
        path.chmod(0o755)
    (bindir / "python").symlink_to("/usr/bin/python3")
    (site / "workspace").mkdir()
    (site / "workspace").chmod(0o1777)
    layer = dir_layer(site, work / "python-packages.tar")
    for scratch in [site, *(work / f"pip-{index}" for index in range(len(installs)))]:
        shutil.rmtree(scratch, ignore_errors=True)  # the torch image's tree is 4 GB: gone before compressing
    return layer
