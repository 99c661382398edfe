"""`trainstack e2e [--provider auto|local|kind|existing] [--env ENV] [--data-cache] [--keep]` and `trainstack e2e down`.

Chooses the provider, runs the suite, prints a step table, keeps artifacts when something fails,
and tears everything down (unless --keep, which prints how to reach the cluster and remove it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import time
from datetime import UTC, datetime
from pathlib import Path

from .. import lock as lockmod
from .. import paths, progress
from ..errors import UserError
from . import artifacts
from .providers import Provider

# The suite, its providers and the upgrade and GitOps tests are imported when `trainstack e2e` runs (in the
# functions below), not at import: every trainstack command imports this module to register its arguments,
# and those modules take about half a second to load.


def choose(name: str, run_dir: Path, lock: lockmod.Lock, args: argparse.Namespace) -> Provider:
    """The provider for `name`; `auto` is kind when Docker answers and the images can be had, else local."""
    from .providers.existing import ExistingProvider
    from .providers.kind import KindProvider, viable
    from .providers.local import DEFAULT_REAL_NODES, LocalProvider, default_nodes

    nodes = getattr(args, "nodes", None) or default_nodes(lock)
    real_nodes = getattr(args, "real_nodes", None) or DEFAULT_REAL_NODES
    # the smoke suite's real nodes run the MLflow tracking server (docs/tracking.md); the upgrade, cluster
    # upgrade and GitOps runs install what they test, without it
    tracking = not any(getattr(args, a, None) for a in ("no_tracking", "gitops", "upgrade_from", "kube_upgrade_to"))
    if name == "auto":
        ok, why = viable(lock)
        if ok:
            return KindProvider(run_dir, lock, reason=f"auto: {why}")
        return LocalProvider(run_dir, lock, port_base=args.port_base, reason=f"auto: kind not possible ({why})",
                             nodes=nodes, real_nodes=real_nodes, tracking=tracking, isolation=tracking)
    if name == "local":
        return LocalProvider(run_dir, lock, port_base=args.port_base, nodes=nodes, real_nodes=real_nodes,
                             tracking=tracking, isolation=tracking)
    if name == "kind":
        return KindProvider(run_dir, lock)
    return ExistingProvider(lock, install=args.install, context=args.context)


def new_run_dir(stamp: str) -> Path:
    """A run's own folder, run-STAMP (short: containerd sockets live under it); -1, -2, ... when another
    run started in the same second (two `trainstack e2e` side by side never share one)."""
    base = paths.cache_dir() / "e2e"
    base.mkdir(parents=True, exist_ok=True)
    for n in range(100):
        run_dir = base / (f"run-{stamp}" + (f"-{n}" if n else ""))
        try:
            run_dir.mkdir()
            return run_dir
        except FileExistsError:
            continue
    raise UserError(f"{base}: 100 run folders named run-{stamp}*: remove the old ones ('trainstack e2e down')")


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace) -> int:
    from ..release import resolve
    from .base import SUMMARY_COLUMNS, Step, summary_rows
    from .gitops import GitOpsSuite, check_args
    from .providers.local import down_kept
    from .suite import Suite

    if args.e2e_command == "down":
        progress.info(down_kept(args.provider))
        return 0
    args.provider = args.provider or "local"
    if args.install and args.provider != "existing":
        raise UserError("--install is only for --provider existing", "local and kind always install", exit_code=2)
    if args.port_base is not None and not 1024 <= args.port_base <= 65500:
        raise UserError(f"--port-base {args.port_base} is out of range", "use a number from 1024 to 65500", exit_code=2)
    if getattr(args, "upgrade_from", None):
        resolve(paths.repo_root(), args.upgrade_from)  # an unknown version or ref: one line, before anything starts
        if args.provider in ("local", "auto") and args.nodes not in (None, "kwok"):
            raise UserError(f"--upgrade-from runs on KWOK nodes (--nodes kwok), not --nodes {args.nodes}",
                            "the old release is installed without the real node's image mirror values", exit_code=2)
        args.nodes = "kwok"
        if args.provider == "existing" and not args.install:
            raise UserError("--upgrade-from installs the old release: with --provider existing pass --install",
                            exit_code=2)
    if getattr(args, "kube_upgrade_to", None):
        if args.provider not in ("local", "auto") or args.nodes not in (None, "kwok") or args.upgrade_from or \
                getattr(args, "gitops", False):
            raise UserError("--kube-upgrade-to runs alone on the local provider's KWOK nodes "
                            "(--provider local --nodes kwok)", exit_code=2)
        args.provider, args.nodes = "local", "kwok"
        from .kubeupgrade import target_lock

        target_lock(lockmod.load(), args.kube_upgrade_to)  # an untested or older release: one line, before anything
    if getattr(args, "gitops", False):
        check_args(args)
    lock = lockmod.load()
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    run_dir = new_run_dir(stamp)
    start = time.monotonic()
    provider = choose(args.provider, run_dir, lock, args)
    cache = " with the data cache" if args.data_cache else ""
    progress.info(f"trainstack e2e: provider {provider.name} ({provider.reason}), env {args.env}{cache}")
    suite = Suite(provider, args.env, run_dir, lock=lock, keep=args.keep, data_cache=args.data_cache)
    gitops = None
    if getattr(args, "gitops", False):
        gitops = GitOpsSuite(provider, args.env, run_dir, lock=lock, keep=args.keep)
        suite = gitops.suite
    failure: UserError | None = None
    previous = signal.signal(signal.SIGTERM, _interrupt)  # a CI timeout still tears down
    upgrade_report: dict | None = None
    try:
        if getattr(args, "upgrade_from", None):
            upgrade_report = run_upgrade(suite, args.upgrade_from, run_dir, tuple(args.helm))
        elif getattr(args, "kube_upgrade_to", None):
            from .kubeupgrade import plan

            suite.run(plan(suite, args.kube_upgrade_to))
        elif gitops is not None:
            gitops.run()
        else:
            suite.run()
    except UserError as err:
        failure = err
    except KeyboardInterrupt:
        failure = UserError("interrupted", exit_code=130)
    where = ""
    if failure is not None and (suite.kube is not None or provider.logs()):
        rows = summary_rows(suite.steps, provider.name)
        summary = "\n".join(" | ".join(row) for row in rows) + f"\n\n{failure.one_line()}\n"
        try:
            logs = {**provider.logs(), **(gitops.logs() if gitops is not None else {})}
            where = str(artifacts.collect(stamp, suite.kube, logs, run_dir, summary))
        except Exception as err:  # noqa: BLE001 - teardown below must still run
            where = f"(could not collect artifacts: {err})"
    signal.signal(signal.SIGTERM, previous)
    teardown_start = time.monotonic()
    down_note, down_error = "", None
    try:
        if gitops is not None and not args.keep:
            gitops.stop()
        down_note = provider.down(keep=args.keep)
    except UserError as err:
        down_error = err
    suite.steps.append(
        Step(
            "teardown",
            "FAIL" if down_error else "pass",
            time.monotonic() - teardown_start,
            down_error.message if down_error else down_note,
        )
    )
    if not args.keep:
        shutil.rmtree(run_dir, ignore_errors=True)
    total = time.monotonic() - start
    progress.table(
        f"trainstack e2e: provider {provider.name}, env {args.env}{cache} ({total:.1f}s)",
        SUMMARY_COLUMNS,
        summary_rows(suite.steps, provider.name),
    )
    summary_path = os.environ.get("TRAINSTACK_E2E_SUMMARY")
    if summary_path:  # machine-readable step table (trainstack bench e2e reads it)
        Path(summary_path).write_text(
            json.dumps(
                {
                    **({"upgrade": upgrade_report} if upgrade_report is not None else {}),
                    "provider": provider.name,
                    "run_dir": str(run_dir),
                    "env": args.env,
                    "data_cache": args.data_cache,
                    "seconds": round(total, 1),
                    "passed": failure is None,
                    **({"memory": memory} if (memory := getattr(provider, "memory_report", None)) else {}),
                    "steps": [
                        {"step": s.name, "provider": provider.name, "result": s.result,
                         "seconds": round(s.seconds, 1), "detail": s.detail, "data": s.data}
                        for s in suite.steps
                    ],
                },
                indent=2,
            )
        )
    if args.keep and down_note:
        progress.info(down_note)
    if failure is not None:
        raise UserError(failure.message, f"artifacts: {where}" if where else failure.hint, exit_code=failure.exit_code)
    if down_error is not None:
        raise down_error
    progress.info(f"e2e passed in {total:.1f}s")
    return 0


def run_upgrade(suite, from_ref: str, run_dir: Path, binaries: tuple[str, ...]) -> dict:
    """`--upgrade-from`: the suite's render and cluster steps, then the upgrade test (e2e/upgrade.py) on that
    cluster, once per helm binary. The local provider starts a fresh cluster for each helm line after the
    first (seconds on KWOK nodes; an uninstall and reinstall on one API server left its ValidatingAdmissionPolicy
    bindings denying with "no params found" until kube-apiserver restarted); other providers uninstall between.
    The step table and figures are printed; a failed step fails the run."""
    from . import upgrade
    from .base import Step
    from .suite import Suite

    reports: list[dict] = []
    extra: list = []
    failure: UserError | None = None
    try:
        # local: one fresh cluster per helm line; other providers: one cluster, uninstall between the lines
        runs = [(b,) for b in binaries] if suite.provider.name == "local" else [tuple(binaries)]
        for i, lines in enumerate(runs):
            current = suite
            if i:
                provider = type(suite.provider)(run_dir / lines[0], suite.lock, nodes="kwok")
                extra.append(provider)
                current = Suite(provider, suite.env, run_dir / lines[0], lock=suite.lock)
            for name, fn in current.cluster_steps():
                current.step(name, fn)
            test = upgrade.for_suite(current, from_ref, run_dir / f"upgrade-{'-'.join(lines)}")
            test.run_dir.mkdir(parents=True, exist_ok=True)
            start = time.monotonic()
            try:
                test.run(lines)
            except UserError as err:
                failure = err
            suite.steps.append(Step(f"upgrade from {from_ref} with {', '.join(lines)}", "FAIL" if failure else "pass",
                                    time.monotonic() - start, failure.message if failure else ", ".join(
                                        f"{k} {v}" for k, v in sorted(test.figures.items()) if k != "crd_conflicts")))
            reports.append(upgrade.report(test, failure))
            if failure is not None:
                break
    finally:
        for provider in extra:
            provider.down(keep=False)
    if failure is not None:
        raise failure
    return {"from": from_ref, "runs": reports}
