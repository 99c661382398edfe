"""runc, asked only for the capabilities this host grants: the private Docker engine's default runtime.

A privileged container asks runc for every capability Linux knows. On a host whose bounding set lacks
one (here CAP_SYS_RESOURCE), runc fails with "unable to apply caps: operation not permitted" and no kind
node starts. Docker 20.10 fills a privileged container's capabilities from its own list, not from the
bounding set, and ignores --cap-drop for it. This wrapper, dockerd's `--default-runtime`, takes out of
the OCI spec (`create --bundle B`: B/config.json; `exec --process P`: P) every capability outside its own
bounding set, then execs the real runc (argv[1]) with the rest of the arguments unchanged. It is the
runtime-side counterpart of containerd's `restrict_oom_score_adj`.

Usage (as dockerd calls it): runcclamp.py REAL_RUNC [runc arguments...]
"""

from __future__ import annotations

import json
import os
import sys

# Linux capability numbers (include/uapi/linux/capability.h), 0 to 40.
NAMES = (
    "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP",
    "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW", "IPC_LOCK", "IPC_OWNER",
    "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT", "SYS_NICE",
    "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP",
    "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF",
    "CHECKPOINT_RESTORE",
)
SETS = ("bounding", "effective", "inheritable", "permitted", "ambient")


def bounding(status: str) -> set[str]:
    """The capability names in the CapBnd line of a /proc/PID/status text."""
    line = next(ln for ln in status.splitlines() if ln.startswith("CapBnd:"))
    mask = int(line.split()[1], 16)
    return {f"CAP_{name}" for bit, name in enumerate(NAMES) if mask >> bit & 1}


def clamp(caps: dict[str, list[str]], allowed: set[str]) -> list[str]:
    """Drop from every set of CAPS the names outside ALLOWED (in place); returns what was dropped."""
    dropped: set[str] = set()
    for key in SETS:
        if isinstance(caps.get(key), list):
            dropped |= {c for c in caps[key] if c not in allowed}
            caps[key] = [c for c in caps[key] if c in allowed]
    return sorted(dropped)


def spec_file(args: list[str]) -> tuple[str, bool] | None:
    """(path, is_process_json) of the spec runc is about to read, from its arguments; None if none."""
    for i, arg in enumerate(args):
        for flag, process in (("--bundle", False), ("-b", False), ("--process", True), ("-p", True)):
            if arg == flag and i + 1 < len(args):
                value = args[i + 1]
                return (value if process else os.path.join(value, "config.json")), process
            if arg.startswith(flag + "=") and flag.startswith("--"):
                value = arg.split("=", 1)[1]
                return (value if process else os.path.join(value, "config.json")), process
    if "create" in args or "run" in args:
        return "config.json", False  # runc's default bundle is the working directory
    return None


def main(argv: list[str]) -> None:
    """Clamp the spec runc is about to read, then become runc (never returns)."""
    real, args = argv[0], argv[1:]
    if any(a in ("create", "run", "exec") for a in args):
        found = spec_file(args)
        if found and os.path.isfile(found[0]):
            path, process = found
            with open(path) as handle:
                spec = json.load(handle)
            caps = spec.get("capabilities") if process else (spec.get("process") or {}).get("capabilities")
            if isinstance(caps, dict):
                with open("/proc/self/status") as handle:
                    allowed = bounding(handle.read())
                if clamp(caps, allowed):
                    with open(path, "w") as handle:
                        json.dump(spec, handle)
    os.execv(real, [real, *args])


if __name__ == "__main__":
    main(sys.argv[1:])
