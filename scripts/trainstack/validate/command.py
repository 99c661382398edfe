"""The `trainstack validate` command: arguments, inputs, exit codes, output.

Exit 0: no errors; 1: at least one error; 2: used wrongly (unknown flag, missing path).
`run()` does the whole command in-process and returns (exit code, stdout), which the CLI and
the fuzz tests share; with `--output json` stdout is always one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys

from ..errors import UsageError, UserError
from . import report

USAGE_HINT = "see 'trainstack validate --help'"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*", metavar="PATH",
                        help="YAML/JSON files or folders (searched recursively for *.yaml, *.yml, *.json); - for stdin")
    parser.add_argument("--env", action="append", default=[], metavar="ENV",
                        help="also render this environment (overlays/ENV) and validate it; may repeat")
    parser.add_argument("--kube-version", metavar="X.Y",
                        help="Kubernetes version of the built-in schemas (default: the pinned one)")
    parser.add_argument("--output", "-o", choices=report.FORMATS, default="text", help="output format")
    parser.add_argument("--policies", action="store_true",
                        help="also evaluate ValidatingAdmissionPolicies + bindings found in the inputs")
    parser.add_argument("--strict", action="store_true", help="unknown kinds are errors, not warnings")
    parser.add_argument("--jobs", "-j", type=int, default=0, metavar="N",
                        help="worker processes for large inputs (default: up to 2)")


def _main(args: argparse.Namespace) -> int:
    code, out = execute(args)
    sys.stdout.write(out)
    sys.stdout.flush()
    return code


def execute(args: argparse.Namespace, stdin_text: str | None = None) -> tuple[int, str]:
    """Run validate for parsed args: (exit code, what goes to stdout). UserErrors propagate
    unless the output is JSON, where the report carries them as `"error": {"message", "hint", "exit_code"}`, the
    shape every subcommand's `--output json` gives an error (errors.UserError.as_data)."""
    try:
        result = _validate(args, stdin_text)
    except UserError as err:
        if args.output == "json":
            body = {"summary": {"documents": 0, "errors": 1, "warnings": 0}, "findings": [],
                    "error": err.as_data()}
            return err.exit_code, json.dumps(body, indent=2) + "\n"
        raise
    return (1 if result.errors else 0), report.render(result, args.output)


def _validate(args: argparse.Namespace, stdin_text: str | None) -> report.Result:
    from .. import lock as lockmod
    from . import documents, engine, schemas

    if not args.paths and not args.env:
        raise UsageError("nothing to validate: give PATHs, - for stdin, or --env ENV", USAGE_HINT)
    if args.jobs < 0:
        raise UsageError("--jobs must be 0 (auto) or more", USAGE_HINT)
    files = documents.expand(args.paths)
    minor = schemas.parse_kube_version(args.kube_version) if args.kube_version else None
    texts: dict[str, str] = {}
    if documents.STDIN in files:
        texts[documents.STDIN] = stdin_text if stdin_text is not None else _read_stdin()
    lock = lockmod.load()
    # --env renders for the release whose schemas are asked for (a tested one: the chart's kubeVersion and
    # version checks see it), else for the lock's
    tested = lock.kubernetes_release(minor) if minor else None
    render_lock = lock.for_kubernetes(tested) if tested else lock
    for env in args.env:
        from .. import render

        label = f"<render --env {env}>"
        texts[label] = render.to_stream(render.render_objects(env, render_lock))
        files.append(label)
    catalog = schemas.load(lock, minor)
    options = engine.Options(strict=args.strict, policies=args.policies, jobs=args.jobs)
    return engine.run(catalog, files, options, texts)


def _read_stdin() -> str:
    """stdin as UTF-8 whatever the locale; an undecodable byte becomes a lone surrogate (surrogateescape),
    which the parser reports as an invalid-text finding on its line."""
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:  # a text-only stream (tests replace sys.stdin)
        return sys.stdin.read()
    text = buffer.read().decode("utf-8", "surrogateescape")
    return text.replace("\r\n", "\n").replace("\r", "\n")  # universal newlines, as sys.stdin.read() gives


def run(argv: list[str], stdin_text: str | None = None) -> tuple[int, str]:
    """`trainstack validate ARGV` in-process: (exit code, stdout). Never raises for bad input."""
    from ..cmdline import Parser

    parser = Parser(prog="trainstack validate")
    add_arguments(parser)
    try:
        args = parser.parse_args(argv)
    except UsageError as err:
        wants_json = "json" in argv and any(a in ("--output", "-o", "--output=json") for a in argv)
        if wants_json:
            return 2, json.dumps({"summary": {"documents": 0, "errors": 1, "warnings": 0}, "findings": [],
                                  "error": err.as_data()}, indent=2) + "\n"
        return 2, ""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            return execute(args, stdin_text)
    except UserError as err:
        return err.exit_code, ""
