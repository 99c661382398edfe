"""The local cluster's own namespaces: a network namespace and a private mount namespace.

Everything of a cluster with a real node (etcd, kube-apiserver, containerd, kubelet, kube-proxy,
the registry, every pod) runs inside them. The network namespace has loopback and a veth pair
with a dead-end default route, so nothing in it can reach the host's uplink; host-side clients
reach the API server and the registry through ports on the host's 127.0.0.1 that `forward.py`
relays into the namespace. The mount namespace keeps every mount (container root filesystems,
pod network namespaces, volumes) and the three global sysctls kubelet writes at start (bind-mounted
over with files holding the values kubelet wants) away from the host. cgroups live under one
root per cluster (kubelet's `cgroupRoot`), removed at teardown.

`Sandbox.create()` makes all of it; `Sandbox.destroy()` kills every process inside (daemons by
mount namespace, containers by cgroup), removes the cgroups and the network namespace, and
returns only when they are gone. `cleanup_stale()` does the same for what a crashed run left.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import proc
from ..errors import UserError
from .common import daemon_env, pid_alive

PREFIX = "trainstack-"
NETNS_DIR = Path("/run/netns")
# Who owns each sandbox (pid, work dir): a sandbox whose owner is gone is stale.
OWNERS_DIR = Path("/run/trainstack/sandboxes")
CGROUP_ROOT = Path("/sys/fs/cgroup")
# The cluster's own link: a bridge in the cluster's namespace holding the control plane's (and real-0's)
# address; every further real node's namespace hangs on it by a veth pair. The default route of the
# cluster's namespace points at a neighbour that does not exist: nothing leaves.
NODE_IP = "10.250.0.1"
DEAD_END = "10.250.0.2"
BRIDGE = "tsn0"


def node_ip(index: int) -> str:
    """The address of real node INDEX on the cluster's link (real-0 shares the control plane's)."""
    return NODE_IP if index == 0 else f"10.250.0.{10 + index}"
# kubelet writes these at start; the sandbox shows it files that already hold what it wants.
KUBELET_SYSCTLS = {
    "vm/overcommit_memory": "1",
    "vm/panic_on_oom": "0",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
    "kernel/keys/root_maxkeys": "1000000",
    "kernel/keys/root_maxbytes": "25000000",
}
# cgroup v1 controllers kubelet needs (hugetlb is optional).
REQUIRED_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "pids")
HOST_COMMANDS = ("ip", "nsenter", "unshare", "iptables", "mount", "openssl")


def _run(cmd: list[str], check: bool = True) -> proc.CompletedProcess:
    result = proc.run(cmd, check=False, stdin=proc.DEVNULL)
    if check and result.returncode != 0:
        last = (result.stderr or result.stdout).strip().splitlines()
        raise UserError(f"'{' '.join(cmd[:5])}' failed: {last[-1] if last else 'no output'}")
    return result


def check_host() -> None:
    """One clear line when this host lacks something the real node needs."""
    if os.geteuid() != 0:
        raise UserError("the real node needs root (network and mount namespaces, cgroups)",
                        "run as root, or use 'trainstack e2e --nodes kwok'")
    missing = [c for c in HOST_COMMANDS if not shutil.which(c)]
    if missing:
        raise UserError(f"the real node needs {', '.join(missing)} on PATH",
                        "run 'trainstack node prereqs' (installs the pinned Debian packages)")
    for controller in REQUIRED_CONTROLLERS:
        if not (CGROUP_ROOT / controller).is_dir():
            raise UserError(f"cgroup controller '{controller}' is not mounted at {CGROUP_ROOT / controller}",
                            "kubelet needs the cpu, cpuacct, cpuset, memory and pids controllers; "
                            "use 'trainstack e2e --nodes kwok' on this host")
    probe = f"{PREFIX}probe-{os.getpid()}"
    result = _run(["ip", "netns", "add", probe], check=False)
    if result.returncode != 0:
        raise UserError(f"cannot create a network namespace: {result.stderr.strip() or result.stdout.strip()}",
                        "the real node needs CAP_SYS_ADMIN; use 'trainstack e2e --nodes kwok' here")
    _run(["ip", "netns", "del", probe], check=False)


def controllers() -> list[Path]:
    """Mounted cgroup hierarchies (one directory each): the v1 controllers and, on a hybrid host, the
    unified v2 tree, where runc also makes each container's cgroup."""
    out = []
    for entry in sorted(CGROUP_ROOT.iterdir()):
        if entry.is_dir() and not entry.is_symlink() and (entry / "cgroup.procs").exists():
            out.append(entry)
    return out


def cgroup_dirs(root: Path) -> list[Path]:
    """ROOT and every cgroup below it, as they are now: a cgroup that goes away while it is listed (a container
    ending) is left out rather than failing the walk (os.walk skips what it cannot read); [] without ROOT."""
    return [Path(top) for top, _dirs, _files in os.walk(root)]


@dataclass
class Sandbox:
    """Namespaces, cgroup root and work dir of one cluster (or, with `parent`, of one further real node
    of that cluster, linked to the parent's bridge); `name` is unique per run."""

    name: str
    workdir: Path
    holder_pid: int = 0
    parent: Sandbox | None = None
    index: int = 0  # with a parent: the real node's index (its address is node_ip(index))
    # shell commands the mount-namespace holder runs after its own mounts (the kind engine's tmpfs and overlay)
    holder_setup: tuple[str, ...] = ()

    @property
    def netns(self) -> str:
        return f"{PREFIX}{self.name}"[:60]

    @property
    def netns_path(self) -> Path:
        return NETNS_DIR / self.netns

    @property
    def cgroup(self) -> str:
        """kubelet's cgroupRoot: every pod and container cgroup lives below it."""
        return f"/{self.netns}"

    @property
    def state_file(self) -> Path:
        return self.workdir / "sandbox.json"

    # -- lifecycle ----------------------------------------------------------------------------
    def create(self) -> Sandbox:
        check_host()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._save()
        _run(["ip", "netns", "add", self.netns])
        self._save()
        ns = ["ip", "-n", self.netns]
        _run([*ns, "link", "set", "lo", "up"])
        if self.parent is None:
            # the bridge keeps a carrier through a veth pair whose far end leads nowhere
            _run([*ns, "link", "add", BRIDGE, "type", "bridge"])
            _run([*ns, "link", "add", "n0", "type", "veth", "peer", "name", "n1"])
            _run([*ns, "link", "set", "n0", "master", BRIDGE])
            _run([*ns, "addr", "add", f"{NODE_IP}/24", "dev", BRIDGE])
            for link in (BRIDGE, "n0", "n1"):
                _run([*ns, "link", "set", link, "up"])
            _run([*ns, "route", "add", "default", "via", DEAD_END, "dev", BRIDGE, "onlink"])
        else:
            # a further node: eth0 here, its peer on the parent's bridge; everything else goes to the parent
            # namespace, whose own default route is the dead end
            host_end = f"vn{self.index}"
            _run(["ip", "-n", self.parent.netns, "link", "add", host_end, "type", "veth", "peer", "name", "eth0",
                  "netns", self.netns])
            _run(["ip", "-n", self.parent.netns, "link", "set", host_end, "master", BRIDGE, "up"])
            _run([*ns, "addr", "add", f"{node_ip(self.index)}/24", "dev", "eth0"])
            _run([*ns, "link", "set", "eth0", "up"])
            _run([*ns, "route", "add", "default", "via", NODE_IP, "dev", "eth0"])
        # pods of other nodes are routed through this namespace (per namespace: the host's value is untouched)
        _run([*self.enter_net(), "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"])
        self._make_cgroups()
        self._start_holder()
        self._save()
        return self

    def _start_holder(self) -> None:
        sysctl_dir = self.workdir / "sysctl"
        sysctl_dir.mkdir(exist_ok=True)
        binds = []
        for rel, value in KUBELET_SYSCTLS.items():
            if not (Path("/proc/sys") / rel).exists():
                continue
            fake = sysctl_dir / rel.replace("/", "_")
            fake.write_text(value + "\n")
            binds.append(f"mount --bind {fake} /proc/sys/{rel}")
        # containerd insists on /run/containerd for shim sockets: a tmpfs only this namespace sees.
        script = " && ".join(
            [*binds, "mkdir -p /run/containerd", "mount -t tmpfs -o mode=0711 tmpfs /run/containerd",
             "echo ready", "exec sleep infinity"]
        )
        log = (self.workdir / "holder.log").open("w")
        holder = proc.start(
            ["nsenter", f"--net={self.netns_path}", "unshare", "--mount", "--propagation", "private",
             "sh", "-c", script],
            stdout=proc.PIPE, stderr=log, stdin=proc.DEVNULL, text=True, start_new_session=True,
        )
        line = holder.stdout.readline() if holder.stdout else ""
        if line.strip() != "ready":
            holder.kill()
            raise UserError(f"the cluster's mount namespace could not be set up: {(self.workdir / 'holder.log').read_text().strip()[-300:]}")
        # nsenter execs unshare, which execs sh, which execs sleep: the same pid throughout
        self.holder_pid = holder.pid

    def _make_cgroups(self) -> None:
        for hierarchy in controllers():
            path = hierarchy / self.cgroup.lstrip("/")
            path.mkdir(exist_ok=True)
            if (hierarchy / "cpuset.cpus").exists():  # a new v1 cpuset is empty until filled from its parent
                for knob in ("cpuset.cpus", "cpuset.mems"):
                    (path / knob).write_text((hierarchy / knob).read_text())

    def enter(self) -> list[str]:
        """Command prefix that runs a program inside both namespaces."""
        if not self.holder_pid:
            raise UserError(f"sandbox {self.netns} is not running")
        return ["nsenter", f"--target={self.holder_pid}", "--mount", "--net"]

    def enter_net(self) -> list[str]:
        return ["nsenter", f"--net={self.netns_path}"]

    def add_routes(self, routes: dict[str, str]) -> None:
        """Routes in this namespace: destination CIDR -> gateway on the cluster's link (replaced if present)."""
        for dest, gateway in routes.items():
            _run(["ip", "-n", self.netns, "route", "replace", dest, "via", gateway])

    def set_link(self, up: bool) -> None:
        """A further node's link to the cluster's bridge, up or down (its host end, in the parent namespace)."""
        if self.parent is None:
            raise UserError(f"sandbox {self.netns} is the cluster's own: it has no link to cut")
        _run(["ip", "-n", self.parent.netns, "link", "set", f"vn{self.index}", "up" if up else "down"])

    def link_bytes(self) -> dict[str, int]:
        """Bytes received and sent on this namespace's link to the cluster (eth0 of a further node; the
        bridge of the cluster's own namespace), read from the kernel's counters."""
        link = "eth0" if self.parent is not None else BRIDGE
        shown = json.loads(_run(["ip", "-n", self.netns, "-s", "-j", "link", "show", "dev", link]).stdout)
        stats = shown[0]["stats64"]
        return {"rx": int(stats["rx"]["bytes"]), "tx": int(stats["tx"]["bytes"])}

    def wait_until(self, script: str, timeout: float, alive: Callable[[], bool] = lambda: True) -> bool:
        """True once bash SCRIPT exits 0 inside the namespace; False when TIMEOUT passes or ALIVE() says
        the daemon it waits for exited first."""
        deadline = time.monotonic() + timeout
        probe = [*self.enter_net(), "bash", "-c", script]
        while not proc.succeeds(probe, timeout=10):
            if time.monotonic() > deadline or not alive():
                return False
            time.sleep(0.2)
        return True

    def wait_listening(self, port: int, timeout: float, alive: Callable[[], bool] = lambda: True) -> bool:
        """True once something accepts connections on 127.0.0.1:PORT inside the namespace (wait_until)."""
        return self.wait_until(f"exec 3<>/dev/tcp/127.0.0.1/{port}", timeout, alive)

    def start(self, name: str, cmd: list[str], log: Path, env: dict[str, str] | None = None) -> proc.Popen:
        """A daemon inside the sandbox, its output in `log`, its environment ENV (default: this process's)
        with the daemons' GOGC (common.daemon_env)."""
        log.parent.mkdir(parents=True, exist_ok=True)
        sink = log.open("a")
        return proc.start([*self.enter(), *cmd], stdout=sink, stderr=proc.STDOUT,
                          stdin=proc.DEVNULL, env=daemon_env(env), start_new_session=True)

    def _save(self, kept: bool = False) -> None:
        OWNERS_DIR.mkdir(parents=True, exist_ok=True)
        record: dict[str, Any] = {"owner_pid": os.getpid(), "workdir": str(self.workdir)}
        if kept:
            record["kept"] = True
        (OWNERS_DIR / f"{self.netns}.json").write_text(json.dumps(record))
        self.state_file.write_text(json.dumps({"name": self.name, "netns": self.netns, "holder_pid": self.holder_pid,
                                               "cgroup": self.cgroup, "workdir": str(self.workdir)}))

    def keep(self) -> None:
        """Outlive this process: a kept cluster's sandbox is no earlier run's leftover (`stale`), so later runs
        leave it alone; `trainstack e2e down` removes it."""
        self._save(kept=True)

    # -- teardown -----------------------------------------------------------------------------
    def processes(self) -> list[int]:
        """Every process inside: those sharing the holder's mount namespace, plus those in its cgroups."""
        found: set[int] = set()
        mnt = _ns_inode(self.holder_pid, "mnt") if self.holder_pid else None
        net = _netns_inode(self.netns_path)
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            pid = int(entry.name)
            if (mnt and _ns_inode(pid, "mnt") == mnt) or (net and _ns_inode(pid, "net") == net):
                found.add(pid)
        for hierarchy in controllers():
            root = hierarchy / self.cgroup.lstrip("/")
            for group in cgroup_dirs(root):
                try:
                    found |= {int(p) for p in (group / "cgroup.procs").read_text().split()}
                except (OSError, ValueError):
                    continue
        found.discard(os.getpid())
        return sorted(found)

    def destroy(self, timeout: float = 30) -> list[str]:
        """Kill everything inside, remove cgroups and the namespace; returns what could not be removed."""
        for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, timeout)):
            pids = [p for p in self.processes() if p != self.holder_pid]
            for pid in pids:
                _kill(pid, sig)
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and [p for p in self.processes() if p != self.holder_pid]:
                time.sleep(0.1)
        if self.holder_pid:
            _kill(self.holder_pid, signal.SIGKILL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.processes():
            for pid in self.processes():
                _kill(pid, signal.SIGKILL)
            time.sleep(0.1)
        left = [f"process {p}" for p in self.processes()]
        left += self._remove_cgroups(deadline)
        if self.netns_path.exists():
            _run(["ip", "netns", "del", self.netns], check=False)
        if self.netns_path.exists():
            left.append(f"network namespace {self.netns}")
        if not left:
            self.state_file.unlink(missing_ok=True)
            (OWNERS_DIR / f"{self.netns}.json").unlink(missing_ok=True)
        return left

    def _remove_cgroups(self, deadline: float) -> list[str]:
        left = []
        for hierarchy in controllers():
            root = hierarchy / self.cgroup.lstrip("/")
            for path in sorted(cgroup_dirs(root), key=lambda p: len(p.parts), reverse=True):
                while True:
                    try:
                        path.rmdir()
                        break
                    except FileNotFoundError:
                        break
                    except OSError:
                        if time.monotonic() > deadline:
                            left.append(f"cgroup {path}")
                            break
                        time.sleep(0.1)
        return left


def kill_all(box: Sandbox, timeout: float = 15) -> None:
    """SIGKILL every process inside BOX but its holder (the namespaces stay, as a powered-off machine's disk
    does); returns once they are gone."""
    deadline = time.monotonic() + timeout
    while True:
        pids = [p for p in box.processes() if p != box.holder_pid]
        if not pids:
            return
        if time.monotonic() > deadline:
            raise UserError(f"sandbox {box.netns}: processes {pids[:5]} survived SIGKILL for {timeout:.0f}s")
        for pid in pids:
            _kill(pid, signal.SIGKILL)
        time.sleep(0.1)


def _ns_inode(pid: int, kind: str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/{kind}").st_ino
    except OSError:
        return None


def _netns_inode(path: Path) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stale(include_kept: bool = False) -> list[Sandbox]:
    """Sandboxes an earlier run left: network namespaces and cgroup roots named trainstack-*, whose owner
    has exited; those of a cluster kept with --keep (`Sandbox.keep`) only with INCLUDE_KEPT."""
    names: set[str] = set()
    if NETNS_DIR.is_dir():
        names |= {p.name for p in NETNS_DIR.iterdir() if p.name.startswith(PREFIX)}
    for hierarchy in controllers() if CGROUP_ROOT.is_dir() else []:
        names |= {p.name for p in hierarchy.iterdir() if p.is_dir() and p.name.startswith(PREFIX)}
    out = []
    for netns in sorted(names):
        if _owner_alive(netns) or (owner_record(netns).get("kept") and not include_kept):
            continue
        box = Sandbox(name=netns[len(PREFIX):], workdir=Path("/nonexistent"))
        holder = _find_holder(box)
        box.holder_pid = holder or 0
        out.append(box)
    return out


def owner_record(netns: str) -> dict[str, Any]:
    """Sandbox NETNS's owner record: the pid that made it (`owner_pid`) and its work folder (`workdir`);
    {} when there is none."""
    try:
        record = json.loads((OWNERS_DIR / f"{netns}.json").read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _owner_alive(netns: str) -> bool:
    try:
        pid = int(owner_record(netns)["owner_pid"])
    except (KeyError, TypeError, ValueError):
        return False
    return pid != os.getpid() and pid_alive(pid)


def _find_holder(box: Sandbox) -> int | None:
    """The `sleep infinity` that holds the mount namespace: a process in the sandbox's netns."""
    net = _netns_inode(box.netns_path)
    if not net:
        return None
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _ns_inode(int(entry.name), "net") == net:
            try:
                if (entry / "cmdline").read_bytes().split(b"\0")[:2] == [b"sleep", b"infinity"]:
                    return int(entry.name)
            except OSError:
                continue
    return None


def cleanup_stale(include_kept: bool = False, kind: str = "") -> list[str]:
    """Remove what crashed runs left (and, with INCLUDE_KEPT, kept clusters' sandboxes), only those whose name
    starts with KIND when given (`kind-`: the kind provider's engines); a line per sandbox removed."""
    done = []
    for box in stale(include_kept):
        if not box.name.startswith(kind):
            continue
        left = box.destroy(timeout=15)
        done.append(f"removed sandbox {box.netns}" + (f" (left: {', '.join(left)})" if left else ""))
    return done


def log_tail(log: Path, lines: int = 2, width: int = 500) -> str:
    """The last LINES error lines of a daemon's LOG (else its last lines), joined on one line."""
    if not log.is_file():
        return "no log"
    text = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    bad = [ln for ln in text if " E" in ln[:12] or "level=error" in ln or "level=fatal" in ln or "fail" in ln.lower()]
    return " | ".join((bad or text)[-lines:])[:width]


def stop_all(procs: list[proc.Popen], grace: float = 3) -> None:
    """Terminate every process at once, then kill what is left after GRACE seconds in all (daemons
    of a test cluster have nothing to hand over)."""
    for process in procs:
        if process.poll() is None:
            process.terminate()
    deadline = time.monotonic() + grace
    for process in procs:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except proc.TimeoutExpired:
            process.kill()
            process.wait()
