"""`make test`'s tiers, the e2e tier beside the others (not a test module).

`python tests/support/run_tiers.py FOLDER TIER...` runs `make tier-TIER` for each TIER (in the repository root):
- the e2e tier (when named) first, in the background, its output to FOLDER/e2e.log;
- the other tiers in the foreground, one after another, in the order given (their output as it comes);
- then the e2e tier's output: what it wrote so far, then the rest as it comes, until it ends.
Exit 0 when every tier passed, else 1 (each tier's own status and figures: FOLDER/TIER.json, tier_times.py).

Why side by side: the machine's CPUs are the limit (2 here), and no tier alone keeps them busy: the unit tier
left 23% of them idle, integration 17%, e2e 12 to 14% (tests wait on clusters; bench/results/tests.json of
ea3750a). The e2e tier is most of the time (about 15 minutes of 21), so the others, about 5 minutes alone, fill
its idle time. Each tier's `cpu_seconds` in FOLDER/TIER.json is what the whole machine spent while it ran, so
with the tiers side by side it counts the ones beside it too. `make test-TIER` still runs one tier alone.

Beside the e2e tier the integration tier's own clusters run too: e2e modules that check nothing of theirs is
left look only at what they started (the e2e tier already runs KWOK clusters beside its real-node groups).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BESIDE = "e2e"  # the tier that runs in the background
POLL_S = 0.5


def make_tier(tier: str, root: Path, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(["make", "--no-print-directory", f"tier-{tier}"], cwd=root, **kwargs)


def follow(log: Path, child: subprocess.Popen, out=None) -> int:
    """Copy LOG to OUT (stdout) from its start until CHILD has ended and every line it wrote is copied;
    CHILD's exit status."""
    out = out or sys.stdout
    with open(log, encoding="utf-8", errors="replace") as source:
        while True:
            ended = child.poll() is not None  # before reading: what it wrote before it ended is read below
            chunk = source.read()
            if chunk:
                out.write(chunk)
                out.flush()
            elif ended:
                return child.returncode
            else:
                time.sleep(POLL_S)


def main(argv: list[str], root: Path = ROOT) -> int:
    folder, tiers = Path(argv[0]), argv[1:]
    folder.mkdir(parents=True, exist_ok=True)
    beside = None
    log = folder / f"{BESIDE}.log"
    if BESIDE in tiers:
        with open(log, "w", encoding="utf-8") as sink:
            beside = make_tier(BESIDE, root, stdout=sink, stderr=subprocess.STDOUT)
        print(f"tier {BESIDE}: running beside the other tiers; its output follows theirs (and is in {log})",
              flush=True)
    failed = []
    for tier in tiers:
        if tier != BESIDE and make_tier(tier, root).wait() != 0:
            failed.append(tier)
    if beside is not None:
        print(f"---- tier {BESIDE} (started with the first tier) ----", flush=True)
        if follow(log, beside) != 0:
            failed.append(BESIDE)
    if failed:
        print(f"failed tiers: {', '.join(failed)}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
