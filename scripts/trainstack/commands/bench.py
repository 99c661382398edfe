"""`trainstack bench [PART...]`: the benchmarks."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..benchmarks import command as bench


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("parts", nargs="*", help=f"parts to run (default {', '.join(bench.DEFAULT_PARTS)}; also: tests, matrix)")
    parser.add_argument("--runs", type=int, default=1, help="repetitions where a part supports it (default 1)")
    parser.add_argument(
        "--cold",
        action="store_true",
        help="e2e: also time a cold build of the local provider's binaries (tens of minutes)",
    )
    parser.add_argument("--provider", dest="providers", metavar="LIST",
                        help="e2e: providers to time one after another in this run, comma-separated (default local; "
                             "e.g. local,kind)")
    validate = parser.add_argument_group("validate (trainstack validate vs kubeconform vs kubectl-validate)")
    validate.add_argument("--docs", dest="documents", type=int, metavar="N",
                          help="documents in the generated corpus (default 10000; e.g. 100000 for memory growth)")
    validate.add_argument("--peers", metavar="LIST",
                          help="peers to measure, comma-separated (default kubeconform,kubectl-validate; "
                               "kubeconform always runs)")
    scale = parser.add_argument_group("scale (TrainJobs vs raw JobSets vs raw Jobs on KWOK nodes)")
    scale.add_argument("--jobs", type=int, help="workloads per path (default 1000; --quick 100)")
    scale.add_argument("--nodes", type=int, help="fake GPU nodes of 8 GPUs (default 100; --quick 10)")
    scale.add_argument("--quick", action="store_true", help="100 workloads on 10 GPU nodes")
    scale.add_argument("--seed", type=int, help="seed of the workload mix (default 15)")
    scale.add_argument("--growth", action="store_true", help="also run 100 and 300 workloads first (10, 30 nodes)")
    scale.add_argument("--gpu-scheduling", action="store_true",
                       help="the TrainJob path with the native gang scheduler off and on, side by side "
                            "(scale.json's gpu_scheduling; docs/scheduling.md)")
    scale.add_argument("--run-seconds", type=int, metavar="N",
                       help="--gpu-scheduling: each pod runs N seconds on its KWOK node (default 0: it completes at "
                            "once), so the pools fill and jobs wait for room")
    scale.add_argument("--tuned", metavar="ENV|FILE",
                       help="run again with the controller QPS/burst/concurrency of overlays/ENV (or a values file)")
    fuzz = parser.add_argument_group("fuzz (validate's property tests, randomized, many examples)")
    fuzz.add_argument("--fuzz-examples", type=int, metavar="N",
                      help="examples per property test (default 5000; CI runs 60-250, derandomized)")
    tests = parser.add_argument_group("tests (make test per tier on a fresh clone of HEAD)")
    tests.add_argument("--tiers", metavar="LIST", help="tiers to time, comma-separated (default unit,chart,integration,e2e)")
    matrix = parser.add_argument_group("matrix (the chart on every tested Kubernetes release; make test-matrix)")
    matrix.add_argument("--kube-versions", metavar="LIST",
                        help="releases to run, comma-separated X.Y or vX.Y.Z (default: every tested one, "
                             "kubernetes.version and kubernetes.matrix)")
    matrix.add_argument("--matrix-parts", metavar="LIST",
                        help="parts per release, comma-separated (default build,validate,e2e,upgrade,kube-upgrade,real)")
    parser.add_argument("--out-dir", dest="results_dir", metavar="DIR", type=Path, help="write results here (default bench/results)")
    parser.set_defaults(func=bench.run)
