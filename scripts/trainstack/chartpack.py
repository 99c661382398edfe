"""Deterministic chart archives and Go module checksums.

A chart .tgz made here depends only on its files: entries sorted, owner, mode and mtime
fixed, gzip header without a timestamp. So `trainstack deps` gives byte-identical archives
for a given lock. `module_h1` recomputes Go's h1: checksum of a module zip, so an upstream
source is verified against the lock before it is used.
"""

from __future__ import annotations

import base64
import functools
import gzip
import hashlib
import io
import json
import tarfile
import zipfile
from pathlib import Path


def module_h1(zip_path: Path) -> str:
    """Go's dirhash Hash1 of a module zip (what go.sum and the lock record). A process that verifies the same
    unchanged file again (same path, inode, size and modification time) gets the hash it computed before:
    Argo CD's module is tens of megabytes, and a test process reads it several times."""
    st = zip_path.stat()
    return _module_h1(str(zip_path.resolve()), st.st_ino, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=32)
def _module_h1(zip_path: str, inode: int, size: int, mtime_ns: int) -> str:
    with zipfile.ZipFile(zip_path) as archive:
        names = sorted(n for n in archive.namelist() if not n.endswith("/"))
        summary = "".join(f"{hashlib.sha256(archive.read(n)).hexdigest()}  {n}\n" for n in names)
    return "h1:" + base64.b64encode(hashlib.sha256(summary.encode()).digest()).decode()


def extract_subdir(zip_path: Path, prefix: str, dest: Path) -> None:
    """Copy the files under `prefix/` inside a module zip into dest (writable, unlike the mod cache)."""
    with zipfile.ZipFile(zip_path) as archive:
        for name in archive.namelist():
            if not name.startswith(prefix + "/") or name.endswith("/"):
                continue
            target = dest / name[len(prefix) + 1:]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(archive.read(name))


def pack_chart(chart_dir: Path, name: str, out: Path) -> None:
    """Write chart_dir as `name/...` into a reproducible tar.gz at out."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for path in sorted(p for p in chart_dir.rglob("*") if p.is_file()):
            rel = path.relative_to(chart_dir).as_posix()
            info = tarfile.TarInfo(f"{name}/{rel}")
            data = path.read_bytes()
            info.size = len(data)
            info.mode = 0o644
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
        gz.write(buffer.getvalue())


def helm_lock_digest(requirements: list[dict], locked: list[dict]) -> str:
    """Helm's Chart.lock digest: sha256 of json.Marshal([Chart.yaml deps, Chart.lock deps])."""
    fields = ("name", "version", "repository", "condition", "tags", "enabled", "import-values", "alias")
    always = {"name", "repository"}

    def go_json(dep: dict) -> dict:
        return {k: dep[k] for k in fields if k in always or dep.get(k)}

    payload = json.dumps([[go_json(d) for d in requirements], [go_json(d) for d in locked]],
                         separators=(",", ":"), ensure_ascii=False)
    payload = payload.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return "sha256:" + hashlib.sha256(payload.encode()).hexdigest()
