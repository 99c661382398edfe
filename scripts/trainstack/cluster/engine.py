"""A private Docker engine for the kind provider, inside namespaces of its own.

kind drives a Docker engine. None runs on this kind of host, and Debian's `docker.io` would start one in
the host's network namespace from its maintainer scripts. So the engine's Debian packages (the lock's
`dockerEngine`, pinned) are downloaded and unpacked into the tool cache without running any of their
scripts, and dockerd runs inside a `Sandbox` (a network namespace with a dead-end route, a private mount
namespace, a cgroup root):

- its bridges, iptables rules, containers and their mounts live in those namespaces only; the node
  containers' cgroups sit below the sandbox's cgroup root (`--cgroup-parent`), so `Sandbox.destroy()`
  finds and kills them like any process of the sandbox;
- its socket is a unix socket on the host's filesystem (`socket`), so kind and the docker client run on
  the host with DOCKER_HOST pointing at it; nothing connects to an address inside;
- kind mounts `/lib/modules` into every node. This host has none, and Docker would create it on the host:
  inside the sandbox's mount namespace `/usr/lib` is an overlay whose upper layer holds an empty
  `modules`, so the host's `/usr/lib` stays as it is;
- its data root (images, containers, volumes) is the run's own, removed with the cluster; the node image is
  imported from its cached tar at each start (seconds).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

from .. import lock as lockmod
from .. import paths, proc, progress
from ..errors import UserError
from . import runcclamp
from .sandbox import Sandbox, log_tail

# The packages of the engine, unpacked in this order (dockerd needs containerd, runc and docker-proxy;
# containerd 1.6 is the engine's own, apart from the real node's 2.x).
PACKAGES = ("docker.io", "containerd", "runc", "tini")
# Where the sandbox's own /run/containerd, dockerd's exec root and the /usr/lib overlay live (its mount
# namespace only: the mount points under /run are created empty on the host's tmpfs /run).
EXEC_ROOT = "/run/trainstack-docker"


def versions(lock: lockmod.Lock) -> dict[str, str]:
    """The engine's Debian packages and their pinned versions (lock `dockerEngine`)."""
    pinned = lock.get("dockerEngine")
    if not isinstance(pinned, dict) or set(pinned) != set(PACKAGES):
        raise UserError(f"{lock.path}: dockerEngine must pin exactly {', '.join(PACKAGES)} (Debian versions)")
    return {name: str(pinned[name]) for name in PACKAGES}


def root(lock: lockmod.Lock) -> Path:
    """The unpacked engine (its usr/bin, usr/sbin), downloaded and unpacked once per set of versions."""
    pinned = versions(lock)
    key = hashlib.sha256(json.dumps(pinned, sort_keys=True).encode()).hexdigest()[:12]
    out = paths.cache_dir() / "engine" / key
    if (out / ".complete").is_file():
        return out
    if not shutil.which("apt-get") or not shutil.which("dpkg-deb"):
        raise UserError("the kind provider's engine comes from Debian packages and this host has no apt-get",
                        "use a host with Docker (the kind provider then uses it), or --provider local")
    with paths.exclusive("engine"), progress.step(f"Docker engine {pinned['docker.io']} (unpacked, no scripts run)"):
        if (out / ".complete").is_file():
            return out
        shutil.rmtree(out, ignore_errors=True)
        debs = out.with_name(out.name + ".debs")
        shutil.rmtree(debs, ignore_errors=True)
        debs.mkdir(parents=True)
        result = proc.run(["apt-get", "download", *(f"{n}={v}" for n, v in pinned.items())], check=False,
                          cwd=debs, timeout=600)
        if result.returncode != 0:
            raise UserError(f"apt-get download of the engine failed: {(result.stderr or result.stdout).strip()[-300:]}",
                            "run 'apt-get update', and check dockerEngine in trainstack.lock.yaml "
                            "against 'apt-cache policy docker.io'")
        staging = out.with_name(out.name + ".tmp")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        for deb in sorted(debs.glob("*.deb")):
            name = proc.run(["dpkg-deb", "-f", str(deb), "Package"]).stdout.strip()
            version = proc.run(["dpkg-deb", "-f", str(deb), "Version"]).stdout.strip()
            if pinned.get(name) != version:
                raise UserError(f"{deb.name}: Debian package {name} {version} is not the pinned {pinned.get(name)}")
            proc.run(["dpkg-deb", "-x", str(deb), str(staging)])
        staging.rename(out)
        (out / ".complete").write_text(json.dumps(pinned))
        shutil.rmtree(debs, ignore_errors=True)
    return out


def holder_setup(workdir: Path) -> tuple[str, ...]:
    """What the sandbox's holder mounts for the engine: a tmpfs exec root, and /usr/lib as an overlay whose
    upper layer holds an empty `modules` (kind's `-v /lib/modules:/lib/modules:ro`)."""
    upper, work = workdir / "usrlib" / "upper", workdir / "usrlib" / "work"
    return (
        f"mkdir -p {EXEC_ROOT} && mount -t tmpfs -o mode=0711 tmpfs {EXEC_ROOT}",
        f"mkdir -p {upper}/modules {work}",
        f"mount -t overlay overlay -o lowerdir=/usr/lib,upperdir={upper},workdir={work} /usr/lib",
    )


class Engine:
    """dockerd inside BOX (its data in DATA_ROOT), driven through the unix socket `socket`."""

    def __init__(self, box: Sandbox, lock: lockmod.Lock, data_root: Path) -> None:
        self.box = box
        self.lock = lock
        self.data_root = data_root
        self.root = root(lock)
        self.process: proc.Popen | None = None

    @property
    def socket(self) -> Path:
        return self.box.workdir / "docker.sock"

    @property
    def log(self) -> Path:
        return self.box.workdir / "logs" / "dockerd.log"

    @property
    def path(self) -> str:
        return f"{self.root}/usr/bin:{self.root}/usr/sbin:/usr/sbin:/usr/bin:/sbin:/bin"

    def env(self) -> dict[str, str]:
        """The environment of a docker client or kind talking to this engine (its own docker CLI first)."""
        return {**os.environ, "DOCKER_HOST": f"unix://{self.socket}", "PATH": f"{self.path}:{os.environ.get('PATH', '')}"}

    def docker(self, *args: str, timeout: float = 300, check: bool = True) -> proc.CompletedProcess:
        result = proc.run([str(self.root / "usr/bin/docker"), *args], check=False, env=self.env(), timeout=timeout,
                          stdin=proc.DEVNULL)
        if check and result.returncode != 0:
            raise UserError(f"docker {' '.join(args[:2])} failed: {(result.stderr or result.stdout).strip()[-300:]}")
        return result

    def start(self, timeout: float = 60) -> None:
        self.data_root.mkdir(parents=True, exist_ok=True)
        if len(str(self.socket)) > 107:
            raise UserError(f"the engine's socket path {self.socket} is over Linux's 107 characters",
                            "set TRAINSTACK_CACHE to a shorter directory")
        env = {**os.environ, "PATH": self.path}
        cmd = [
            str(self.root / "usr/sbin/dockerd"),
            f"--host=unix://{self.socket}",
            f"--data-root={self.data_root}",
            f"--exec-root={EXEC_ROOT}/exec",
            f"--pidfile={self.box.workdir / 'dockerd.pid'}",
            "--bridge=none",
            "--iptables=true",
            "--ip-masq=false",
            "--userland-proxy=true",
            f"--cgroup-parent={self.box.cgroup}/docker",
            "--exec-opt=native.cgroupdriver=cgroupfs",
            "--default-cgroupns-mode=private",
            "--storage-driver=overlay2",
            "--oom-score-adjust=0",
            f"--add-runtime=clamped={self._clamped_runc()}",
            "--default-runtime=clamped",
            "--log-level=warn",
            "--containerd-namespace=trainstack",
            "--containerd-plugins-namespace=trainstack-plugins",
        ]
        self.process = self.box.start("dockerd", cmd, self.log, env=env)
        deadline = time.monotonic() + timeout
        while self.docker("version", "--format", "{{.Server.Version}}", check=False, timeout=10).returncode != 0:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise UserError(f"dockerd did not start in {self.box.netns}: {log_tail(self.log)}")
            time.sleep(0.3)

    def _clamped_runc(self) -> Path:
        """The engine's runc behind runcclamp (privileged containers get this host's capabilities)."""
        wrapper = self.box.workdir / "runc-clamped"
        wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} -I {Path(runcclamp.__file__).resolve()} "
                           f"{self.root / 'usr/sbin/runc'} \"$@\"\n")
        wrapper.chmod(0o755)
        return wrapper
