"""The output of `trainstack bench scale`: the picture (latency per stage, completions over time)
and the tables printed at the end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import progress
from .scale_workloads import PATHS, STAGES


def plot(result: dict[str, Any], out: Path) -> None:
    import matplotlib  # lazy: a heavy import only the end of a scale run needs

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"trainjob": "tab:blue", "jobset": "tab:orange", "job": "tab:green"}
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5.5))
    width = 0.26
    for i, path in enumerate(PATHS):
        data = result["paths"][path].get("stage_samples_s", {})
        stages = [s for s in STAGES if data.get(s)]
        positions = [STAGES.index(s) + (i - 1) * width for s in stages]
        if stages:
            box = left.boxplot([data[s] for s in stages], positions=positions, widths=width * 0.9,
                               patch_artist=True, showfliers=True, flierprops={"markersize": 2})
            for patch in box["boxes"]:
                patch.set_facecolor(colors[path])
                patch.set_alpha(0.6)
        left.plot([], [], color=colors[path], linewidth=8, alpha=0.6, label=path)
    left.set_xticks(range(len(STAGES)), [s.replace("_", "\n") for s in STAGES])
    left.set_ylabel("seconds after create")
    left.set_title("latency per stage (from the create returning)")
    left.legend()
    for path in PATHS:
        ends = result["paths"][path].get("completions_s", [])
        label = f"{path}: {result['paths'][path]['per_s']}/s"
        right.step(ends, range(1, len(ends) + 1), where="post", color=colors[path], label=label)
    right.set_xlabel("seconds since the first create")
    right.set_ylabel("workloads complete")
    right.set_title("completions over time")
    right.legend()
    fig.suptitle(f"{result['trainjobs']} TrainJobs on {result['nodes']} GPU nodes (KWOK), "
                 f"TrainJob path at {result['ratio_vs_jobset']:.2f}x raw JobSet")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


GANG_STAGES = ("jobset_created", "pods_created", "pods_bound", "complete")


def plot_gang(comparison: dict[str, Any], out: Path) -> None:
    """`--gpu-scheduling`'s picture: stage latencies (p50 bar, p90 tick) and the partially placed jobs,
    gang scheduling off and on side by side."""
    import matplotlib  # lazy, as plot's

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"off": "tab:gray", "on": "tab:purple"}
    fig, (left, right) = plt.subplots(1, 2, figsize=(16, 6), gridspec_kw={"width_ratios": [3, 3]})
    width = 0.38
    for i, mode in enumerate(("off", "on")):
        run = comparison[mode]
        xs = [n + (i - 0.5) * width for n in range(len(GANG_STAGES))]
        p50 = [run["stages"].get(s, {}).get("p50", 0.0) for s in GANG_STAGES]
        p90 = [run["stages"].get(s, {}).get("p90", 0.0) for s in GANG_STAGES]
        left.bar(xs, p50, width * 0.95, color=colors[mode], alpha=0.75,
                 label=f"gangs {mode}: {run['trainjob_per_s']}/s")
        left.scatter(xs, p90, marker="_", s=400, color="black", zorder=3)
        counts = [run["max_held"], run["jobs_ever_held"], run["max_partially_placed"],
                  run["jobs_ever_partially_placed"]]
        bars = right.bar([n + (i - 0.5) * width for n in range(4)], counts, width * 0.95, color=colors[mode],
                         alpha=0.75, label=f"gangs {mode}: {run['podgroups']} PodGroups "
                                           f"({run['multi_node_trainjobs']} multi-node jobs)")
        right.bar_label(bars, padding=2)
    left.scatter([], [], marker="_", s=200, color="black", label="p90")
    left.set_xticks(range(len(GANG_STAGES)), [s.replace("_", "\n") for s in GANG_STAGES])
    left.set_ylabel("seconds after create (p50 bar)")
    left.set_title("TrainJob stage latency")
    left.legend()
    right.set_xticks(range(4), [f"> {comparison['held_s']:.0f} s: most\nat one moment", f"> {comparison['held_s']:.0f} s:\njobs ever",
                                f"> {comparison['spread_s']} s: most\nat one moment", f"> {comparison['spread_s']} s:\njobs ever"])
    right.set_title(f"partially placed jobs (binds spread over more than N s;\n"
                    f"the goal is 0 over {comparison['held_s']:.0f} s with gangs)")
    right.legend()
    off = comparison["off"]
    ran = f", each pod running {off['run_seconds']} s" if off.get("run_seconds") else ""
    fig.suptitle(f"{off['trainjobs']} TrainJobs on {off['gpu_nodes']} GPU + {off['cpu_nodes']} CPU nodes (KWOK{ran}), "
                 f"gang scheduling off and on: throughput {comparison['throughput_ratio_on_vs_off']:.2f}x with gangs")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def table(result: dict[str, Any]) -> None:
    rows = []
    for path in PATHS:
        p = result["paths"][path]
        for i, stage in enumerate(s for s in STAGES if s in p["stages"]):
            s = p["stages"][stage]
            head = (path, f"{p['completed']}/{p['workloads']}", p["per_s"]) if i == 0 else ("", "", "")
            rows.append((*head, stage, s["p50"], s["p90"], s["p99"], s["max"]))
    progress.table(f"bench scale: {result['trainjobs']} workloads on {result['nodes']} GPU nodes "
                   f"(seconds after the create; TrainJob path at {result['ratio_vs_jobset']}x raw JobSet)",
                   ["path", "complete", "per s", "stage", "p50", "p90", "p99", "max"], rows)
    ctl_rows = []
    tj = result["paths"]["trainjob"]
    for name in ("trainer-controller-manager", "jobset-controller"):
        m = tj["controllers"].get(name, {})
        busy = ", ".join(f"{k} {v}" for k, v in m.get("workqueue_busy_fraction", {}).items())
        ctl_rows.append((name, tj["cpu_s"].get(name, 0.0), tj["peak_rss_mb"].get(name, 0.0),
                         m.get("api_requests_per_s", 0), int(sum(m.get("reconcile_errors", {}).values())),
                         int(sum(m.get("workqueue_retries", {}).values())), busy))
    progress.table("controllers over the TrainJob path", ["controller", "CPU s", "peak MB", "req/s", "errors",
                                                           "retries", "busy"], ctl_rows)
