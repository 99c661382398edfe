"""`trainstack node`: what the local cluster's real node needs from this host.

`trainstack node prereqs` installs the Debian packages the lock pins under `debian` (runc, the
CNI plugins, iptables, conntrack, ipset, mmdebstrap, zstd) with apt-get, at exactly those versions, and skips
itself when they are installed; `--check` only reports. `trainstack node status` lists the real
node's pinned parts (tools, packages) and whether each is there, then every real node of the local
clusters this host runs (kept ones too): its address, pod CIDR and whether each daemon is up.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

from . import lock as lockmod
from . import proc, progress
from .cluster.common import pid_alive
from .e2e.providers.local import state_dir
from .errors import UserError, output_line

NODE_TOOLS = ("kubernetes-node", "containerd", "kube-router", "coredns", "registry", "crane")


def pinned_packages(lock: lockmod.Lock) -> dict[str, str]:
    section = lock.get("debian")
    if not isinstance(section, dict) or not all(isinstance(v, str) and v for v in section.values()):
        raise UserError(f"{lock.path}: 'debian' must map Debian package names to versions")
    return dict(section)


def installed_versions(names: list[str]) -> dict[str, str]:
    if not shutil.which("dpkg-query"):
        return {}
    out = proc.run(["dpkg-query", "-W", "-f", "${Package} ${Version} ${db:Status-Abbrev}\\n", *names], check=False)
    found = {}
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[2].startswith("ii"):
            found[parts[0]] = parts[1]
    return found


def missing_packages(lock: lockmod.Lock) -> dict[str, str]:
    """Package -> pinned version, for each pinned package not installed at that version."""
    pins = pinned_packages(lock)
    have = installed_versions(list(pins))
    return {name: version for name, version in pins.items() if have.get(name) != version}


def install_prereqs(lock: lockmod.Lock) -> list[str]:
    missing = missing_packages(lock)
    if not missing:
        return []
    if not shutil.which("apt-get"):
        raise UserError(f"the real node needs the Debian packages {', '.join(missing)} and there is no apt-get",
                        "install them at the versions in trainstack.lock.yaml (debian), or use --nodes kwok")
    if os.geteuid() != 0:
        raise UserError(f"installing {', '.join(missing)} needs root", "run 'trainstack node prereqs' as root")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    with progress.step(f"apt-get install {' '.join(f'{n}={v}' for n, v in missing.items())}"):
        update = proc.run(["apt-get", "update", "-qq"], check=False, env=env)
        if update.returncode != 0:
            raise UserError(f"apt-get update failed: {(update.stderr or update.stdout).strip()[-300:]}")
        result = proc.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends",
                           *[f"{n}={v}" for n, v in missing.items()]], check=False, env=env)
    if result.returncode != 0:
        raise UserError(f"apt-get install failed: {output_line(result.stderr or result.stdout, markers=(), limit=300)}",
                        "check the versions under 'debian' in trainstack.lock.yaml against apt-cache policy")
    return list(missing)


def running_nodes() -> list[dict[str, Any]]:
    """Every real node of the local clusters this host runs (kept with --keep, or a run in progress):
    name, address, pod CIDR and whether each of its daemons (kubelet, containerd, kube-proxy) is up."""
    out: list[dict[str, Any]] = []
    for path in sorted(state_dir().glob("*.json")) if state_dir().is_dir() else []:
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for node in state.get("real_nodes") or []:
            parts = {name: pid_alive(int(pid)) for name, pid in (node.get("pids") or {}).items()}
            out.append({"cluster": state.get("cluster", path.stem), **{k: node.get(k) for k in ("name", "ip", "podCIDR",
                                                                                                 "netns", "logs")},
                        "parts": parts})
    return out
