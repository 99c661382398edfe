"""The resident memory of a local cluster with real nodes, sampled while it runs.

`MemorySampler` reads, every INTERVAL seconds on a background thread, the resident set (VmRSS) of
every process in each of the cluster's sandboxes (the control plane and real-0 in the cluster's
namespaces; each further real node in its own: daemons, shims and containers alike) and keeps the
peak of the sum, with each part at that moment. Pages shared between processes (the same binary in
two kubelets) count once per process, as `ps` counts them: an upper bound.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

INTERVAL = 2.0


def rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


class MemorySampler:
    def __init__(self, sandboxes: dict[str, Any], interval: float = INTERVAL) -> None:
        self.sandboxes = sandboxes  # part name -> Sandbox (its processes())
        self.interval = interval
        self.peak_total = 0
        self.peak_parts: dict[str, int] = {}
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="trainstack-memory", daemon=True)

    def start(self) -> MemorySampler:
        self._thread.start()
        return self

    def sample(self) -> None:
        parts = {name: sum(rss_bytes(pid) for pid in box.processes()) for name, box in self.sandboxes.items()}
        total = sum(parts.values())
        self.samples += 1
        if total > self.peak_total:
            self.peak_total, self.peak_parts = total, parts

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sample()
            except OSError:  # a sandbox going away mid-read: the next sample is whole again
                continue

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        return self.report()

    def report(self) -> dict[str, Any]:
        mib = 1024 * 1024
        return {"peak_rss_mib": round(self.peak_total / mib), "samples": self.samples,
                "peak_rss_mib_by_part": {k: round(v / mib) for k, v in self.peak_parts.items()}}


def sampler_for(cluster: Any) -> MemorySampler | None:
    """A started sampler over the real-node cluster's sandboxes, or None without real nodes."""
    nodes = getattr(cluster, "nodes", None) or []
    if not nodes:
        return None
    parts = {"control plane + real-0": nodes[0].sandbox, **{n.name: n.sandbox for n in nodes[1:]}}
    return MemorySampler(parts).start()
