"""cluster/common.py: free_port, the ports given to host servers (control planes, host controllers,
registries), and daemon_env, the environment of the local cluster's Go daemons."""

from __future__ import annotations

import socket

from trainstack.cluster import common


def test_free_ports_lie_below_the_ephemeral_range_and_bind():
    low = common.ephemeral_range()[0]
    ports = [common.free_port() for _ in range(20)]
    assert len(set(ports)) == 20  # asked one after another, before any binds: never the same port twice
    for port in ports:
        assert common.LOWEST_PORT <= port < low  # never a port an outgoing connection may take meanwhile
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port))


def test_a_taken_port_is_not_given(monkeypatch):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", common.LOWEST_PORT))
        held.listen()
        monkeypatch.setattr(common.random, "sample", lambda population, k: [common.LOWEST_PORT, common.LOWEST_PORT + 1])
        monkeypatch.setattr(common, "_given", set())
        assert common.free_port() == common.LOWEST_PORT + 1


def test_without_room_below_the_ephemeral_range_the_os_picks(tmp_path):
    narrow = tmp_path / "ip_local_port_range"
    narrow.write_text(f"{common.LOWEST_PORT + 100}\t60999\n")
    assert common.ephemeral_range(narrow) == (common.LOWEST_PORT + 100, 60999)
    port = common.free_port(narrow)
    assert port >= common.ephemeral_range()[0]  # the OS's pick: from the machine's own ephemeral range
    unreadable = tmp_path / "missing"
    assert common.ephemeral_range(unreadable) == (32768, 60999)


def test_the_daemons_collect_garbage_less_often_unless_told(monkeypatch):
    monkeypatch.delenv("GOGC", raising=False)
    monkeypatch.setenv("TRAINSTACK_PROBE", "1")
    inherited = common.daemon_env()
    assert inherited["GOGC"] == common.DAEMON_GOGC and inherited["TRAINSTACK_PROBE"] == "1"
    # a daemon given an environment of its own (a node's containerd) gets the setting too, and nothing else
    assert common.daemon_env({"PATH": "/bin"}) == {"PATH": "/bin", "GOGC": common.DAEMON_GOGC}
    # GOGC set by the caller's environment, or in the one given, wins
    assert common.daemon_env({"GOGC": "50"})["GOGC"] == "50"
    monkeypatch.setenv("GOGC", "200")
    assert common.daemon_env({"PATH": "/bin"})["GOGC"] == "200"
    assert int(common.DAEMON_GOGC) > 100  # Go's default
