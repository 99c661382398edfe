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
from .providers import PROVIDERS, Provider


def choose(name: str, run_dir: Path, lock: lockmod.Lock, args: argparse.Namespace) -> Provider:
    """The provider for `name`; `auto` is kind when Docker answers and the images can be had, else local."""
    from .providers.existing import ExistingProvider
    from .providers.kind import KindProvider, viable
    from .providers.local import LocalProvider, default_nodes

    nodes = getattr(args, "nodes", None) or default_nodes(lock)
    if name == "auto":
        ok, why = viable(lock)
        if ok:
            return KindProvider(run_dir, lock, reason=f"auto: {why}")
        return LocalProvider(run_dir, lock, port_base=args.port_base, reason=f"auto: kind not possible ({why})",
                             nodes=nodes)
    if name == "local":
        return LocalProvider(run_dir, lock, port_base=args.port_base, nodes=nodes)
    if name == "kind":
        return KindProvider(run_dir, lock)
    return ExistingProvider(lock, install=args.install, context=args.context)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace) -> int:
    from .suite import Suite, summary_rows

    if args.e2e_command == "down":
        from .providers.local import down_kept

        progress.info(down_kept())
        return 0
    if args.install and args.provider != "existing":
        raise UserError("--install is only for --provider existing", "local and kind always install", exit_code=2)
    if args.port_base is not None and not 1024 <= args.port_base <= 65500:
        raise UserError(f"--port-base {args.port_base} is out of range", "use a number from 1024 to 65500", exit_code=2)
    lock = lockmod.load()
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    run_dir = paths.cache_dir() / "e2e" / f"run-{stamp}"
    run_dir.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    provider = choose(args.provider, run_dir, lock, args)
    cache = " with the data cache" if args.data_cache else ""
    progress.info(f"trainstack e2e: provider {provider.name} ({provider.reason}), env {args.env}{cache}")
    suite = Suite(provider, args.env, run_dir, lock=lock, keep=args.keep, data_cache=args.data_cache)
    failure: UserError | None = None
    previous = signal.signal(signal.SIGTERM, _interrupt)  # a CI timeout still tears down
    try:
        suite.run()
    except UserError as err:
        failure = err
    except KeyboardInterrupt:
        failure = UserError("interrupted", exit_code=130)
    where = ""
    if failure is not None and (suite.kube is not None or provider.logs()):
        summary = "\n".join(" | ".join(row) for row in summary_rows(suite.steps)) + f"\n\n{failure.one_line()}\n"
        try:
            where = str(artifacts.collect(stamp, suite.kube, provider.logs(), run_dir, summary))
        except Exception as err:  # noqa: BLE001 - teardown below must still run
            where = f"(could not collect artifacts: {err})"
    signal.signal(signal.SIGTERM, previous)
    teardown_start = time.monotonic()
    down_note, down_error = "", None
    try:
        down_note = provider.down(keep=args.keep)
    except UserError as err:
        down_error = err
    from .suite import Step

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
        ["step", "result", "seconds", "detail"],
        summary_rows(suite.steps),
    )
    summary_path = os.environ.get("TRAINSTACK_E2E_SUMMARY")
    if summary_path:  # machine-readable step table (trainstack bench e2e reads it)
        Path(summary_path).write_text(
            json.dumps(
                {
                    "provider": provider.name,
                    "env": args.env,
                    "data_cache": args.data_cache,
                    "seconds": round(total, 1),
                    "passed": failure is None,
                    "steps": [
                        {"step": s.name, "result": s.result, "seconds": round(s.seconds, 1), "detail": s.detail}
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


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("e2e", help="smoke TrainJobs end to end on a real control plane")
    parser.add_argument(
        "e2e_command",
        nargs="?",
        choices=["run", "down"],
        default="run",
        help="run (default) the suite, or down: stop a cluster kept with --keep",
    )
    parser.add_argument(
        "--provider",
        choices=PROVIDERS,
        default="local",
        help="local (default): local processes and fake nodes; kind; existing: the current "
        "context; auto: kind when Docker and the images are there, else local",
    )
    parser.add_argument("--env", default="dev", help="overlay whose values.yaml is installed (default dev)")
    parser.add_argument(
        "--data-cache",
        action="store_true",
        help="also install the LWS data cache (dataCache.enabled, for the smoke namespace) and run its runtime",
    )
    parser.add_argument("--keep", action="store_true", help="keep the cluster; 'trainstack e2e down' removes it")
    parser.add_argument("--install", action="store_true", help="existing provider: install (and uninstall) the chart")
    parser.add_argument("--context", help="existing provider: kube context (default: the current one)")
    parser.add_argument(
        "--nodes",
        choices=("real", "kwok", "both"),
        default=None,
        help="local provider: real (a kubelet + containerd node only), kwok (fake nodes only) or both "
        "(default: both when the real-node parts are built, else kwok)",
    )
    parser.add_argument(
        "--port-base",
        type=int,
        default=None,
        help="local provider: fixed 127.0.0.1 ports from this number up (default: free random ports)",
    )
    parser.set_defaults(func=run)
