"""Ports and processes of the local cluster, shared by the control plane, the sandbox and the real node.

Small helpers with no knowledge of either: whether a loopback port is free, a port the OS picks,
whether a pid is still running, and stopping our own processes by pid. Everything in `cluster`
may import this module; it imports nothing of `cluster` back.
"""

from __future__ import annotations

import os
import signal
import socket
import time

from ..errors import UserError


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port nobody listens on now (the OS picks it)."""
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
