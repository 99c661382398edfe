"""Relays ports on the host's 127.0.0.1 into the cluster's network namespace.

`python -m trainstack.cluster.forward NETNS_PATH HOSTPORT:NSPORT ...` binds each HOSTPORT on the
host's loopback first, then moves itself into the cluster's network namespace (setns), so every
connection it opens goes to 127.0.0.1:NSPORT there. A socket keeps the namespace it was created
in: the listeners stay on the host side, the upstream connections are inside. Nothing ever
connects from the host's namespace to a pod or service address. Prints `ready` once listening.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import socket
import sys

CLONE_NEWNET = 0x40000000


def setns(path: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({path}): {os.strerror(err)}")
    finally:
        os.close(fd)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            writer.close()
        except OSError:
            pass


def _handler(target_port: int):
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target_port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    return handle


async def serve(listeners: list[tuple[socket.socket, int]]) -> None:
    servers = [await asyncio.start_server(_handler(port), sock=sock) for sock, port in listeners]
    print("ready", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


def main(argv: list[str]) -> int:
    netns, pairs = argv[0], argv[1:]
    listeners = []
    for pair in pairs:
        host_port, ns_port = (int(p) for p in pair.split(":"))
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", host_port))
        sock.listen(128)
        sock.setblocking(False)
        listeners.append((sock, ns_port))
    setns(netns)  # from here on, new sockets belong to the cluster's namespace
    asyncio.run(serve(listeners))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
