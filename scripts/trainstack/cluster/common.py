"""Ports and processes of the local cluster, shared by the control plane, the sandbox and the real node.

Small helpers with no knowledge of either: whether a loopback port is free, a free port to listen on,
whether a pid is still running, stopping our own processes by pid, and the environment of a daemon.
Everything in `cluster` may import this module; it imports nothing of `cluster` back.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import time
from pathlib import Path

from ..errors import UserError

# The Go garbage collector's target for the cluster's long-running Go daemons (etcd, kube-apiserver, the
# controller manager, the scheduler, KWOK, containerd and its shims, kubelet, kube-proxy, kube-router, the
# registry, the host controllers, Argo CD): the heap grows to 5 times the live data before a collection,
# where Go's default (100) collects at twice. On this 2-core kind of machine the daemons of three clusters
# share the CPUs with the tests, and an idle collector's mark workers take CPU the others wait for: one
# `trainstack e2e` run's API server uses less CPU with this, for about twice the memory (the figures:
# docs/decisions.md; docs/local-cluster.md). GOGC set in the caller's environment wins.
DAEMON_GOGC = "400"


def daemon_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """ENV (default: this process's environment) for a long-running Go daemon of the local cluster: with
    GOGC at DAEMON_GOGC unless ENV or this process's environment sets it."""
    out = dict(os.environ if env is None else env)
    out.setdefault("GOGC", os.environ.get("GOGC", DAEMON_GOGC))
    return out


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


PORT_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PORT = 10000  # free_port's ports: from here up to the kernel's ephemeral range
PICKS = 64
_given: set[int] = set()  # the ports free_port gave in this process (two asks before either binds get two)


def ephemeral_range(source: Path = PORT_RANGE_FILE) -> tuple[int, int]:
    """The kernel's range of local ports for outgoing connections (Linux's default where unreadable)."""
    try:
        low, high = (int(n) for n in source.read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def free_port(source: Path = PORT_RANGE_FILE) -> int:
    """A free loopback port to give a server that binds it later: one below the kernel's ephemeral range,
    at random, that binds now. A port from that range (the OS's pick for port 0), once released, may
    become the local port of any process's outgoing connection before the server binds it, and a
    long-lived one (a controller's watch) keeps it: a host controller failed three starts with "address
    already in use" so, on a loaded machine. The OS's pick where that range leaves no room below it."""
    low = ephemeral_range(source)[0]
    if low - LOWEST_PORT >= 1024:
        for port in random.sample(range(LOWEST_PORT, low), PICKS):
            if port not in _given and port_is_free(port):
                _given.add(port)
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def check_ports_free(named: dict[str, int]) -> None:
    """A UserError naming the first taken port and who wanted it."""
    for name, port in named.items():
        if not port_is_free(port):
            raise UserError(
                f"port 127.0.0.1:{port} ({name}) is already in use",
                "stop what listens there or pick another --port-base",
            )


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not yet reaped) is not running
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def stop_pids(pids: list[int], grace: float = 10.0) -> None:
    """SIGTERM the given processes (ours), then SIGKILL what is still there after `grace` seconds."""
    alive = [p for p in pids if pid_alive(p)]
    for pid in alive:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(pid_alive(p) for p in alive):
        time.sleep(0.1)
    for pid in alive:
        if pid_alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
