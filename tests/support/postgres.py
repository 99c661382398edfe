"""A PostgreSQL server for the tests: "your own database" of the chart's `tracking.existingDatabaseSecret`.

The lock pins Debian's `postgresql-15` (trainstack.lock.yaml, `debian`; `trainstack node prereqs` installs it).
`running(netns, address)` initialises a scratch cluster as the `postgres` user and starts the server inside
network namespace NETNS (a real node's), listening on ADDRESS only, where the node's pods reach it, with
password (SCRAM) logins from anywhere in that network; `psql` runs there too. Nothing listens on the host.
"""

from __future__ import annotations

import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

BIN = Path("/usr/lib/postgresql/15/bin")
USER = "mlflow"
PORT = 5432


@dataclass
class Server:
    netns: str
    address: str
    password: str
    sockets: Path

    def uri(self, database: str) -> str:
        return f"postgresql://{USER}:{self.password}@{self.address}:{PORT}/{database}"

    def as_postgres(self, *cmd: str) -> list[str]:
        return ["ip", "netns", "exec", self.netns, "setpriv", "--reuid=postgres", "--regid=postgres",
                "--clear-groups", *cmd]

    def psql(self, database: str, sql: str) -> list[list[str]]:
        """Rows of SQL in DATABASE (psql over the unix socket), each a list of its columns."""
        psql = BIN / "psql" if (BIN / "psql").exists() else Path("/usr/bin/psql")
        result = subprocess.run(self.as_postgres(str(psql), "-h", str(self.sockets), "-p", str(PORT), "-U", USER,
                                                 "-d", database, "-AtF", "\t", "-c", sql),
                                capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 0, result.stderr
        return [line.split("\t") for line in result.stdout.splitlines() if line]


@contextmanager
def running(netns: str, address: str, databases: tuple[str, ...]) -> Iterator[Server]:
    if not (BIN / "postgres").is_file() or shutil.which("setpriv") is None:
        pytest.fail(f"PostgreSQL 15 is not installed ({BIN}): run 'trainstack node prereqs'")
    root = Path(tempfile.mkdtemp(prefix="trainstack-pg-"))  # the postgres user must reach it: not under pytest's
    root.chmod(0o755)
    data, sockets, pwfile = root / "data", root / "run", root / "password"
    server = Server(netns, address, secrets.token_hex(16), sockets)
    pwfile.write_text(server.password + "\n")
    sockets.mkdir()
    shutil.chown(root, "postgres", "postgres")
    shutil.chown(sockets, "postgres", "postgres")
    shutil.chown(pwfile, "postgres", "postgres")
    process = None
    try:
        init = subprocess.run(server.as_postgres(str(BIN / "initdb"), "-D", str(data), "-U", USER, f"--pwfile={pwfile}",
                                                 "--auth-local=trust", "--auth-host=scram-sha-256"),
                              capture_output=True, text=True, timeout=120, check=False)
        assert init.returncode == 0, init.stderr
        with (data / "pg_hba.conf").open("a") as hba:  # the node's pods: any address, a password each
            hba.write("host all all 0.0.0.0/0 scram-sha-256\n")
        process = subprocess.Popen(server.as_postgres(str(BIN / "postgres"), "-D", str(data), "-c",
                                                      f"listen_addresses={address}", "-p", str(PORT), "-c",
                                                      f"unix_socket_directories={sockets}"),
                                   stdout=(root / "server.log").open("w"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while subprocess.run(server.as_postgres(str(BIN / "pg_isready"), "-h", str(sockets), "-p", str(PORT)),
                             capture_output=True, check=False).returncode != 0:
            assert process.poll() is None, (root / "server.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "PostgreSQL did not accept connections within 60s"
            time.sleep(0.5)
        for database in databases:
            made = subprocess.run(server.as_postgres(str(BIN / "createdb"), "-h", str(sockets), "-p", str(PORT),
                                                     "-U", USER, database), capture_output=True, text=True, timeout=60,
                                  check=False)
            assert made.returncode == 0, made.stderr
        yield server
    finally:
        if process is not None:
            process.send_signal(signal.SIGINT)  # a fast shutdown: clients still connected are disconnected
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(root, ignore_errors=True)
