"""Runs the pinned helm (and kustomize) with state kept in the trainstack cache.

HELM_CACHE_HOME/CONFIG/DATA point under the cache so a user's own helm repositories and
plugins never change what trainstack renders.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import IO

from . import api, paths, proc, tools
from . import lock as lockmod
from .errors import UserError, output_line


def env(lock: lockmod.Lock | None = None) -> dict[str, str]:
    environment = tools.bin_dir_env(lock)
    home = paths.cache_dir() / "helm"
    for key, sub in (("HELM_CACHE_HOME", "cache"), ("HELM_CONFIG_HOME", "config"), ("HELM_DATA_HOME", "data")):
        environment[key] = str(home / sub)
    environment.setdefault("HELM_REGISTRY_CONFIG", str(home / "config" / "registry.json"))
    return environment


def run(args: list[str], lock: lockmod.Lock | None = None, timeout: float | None = 300,
        check: bool = True, binary: str = "helm", cwd: Path | None = None,
        input_text: str | None = None) -> subprocess.CompletedProcess:
    """Run pinned `binary` (helm, helm3 or kustomize); a failure becomes a UserError with helm's message."""
    exe = tools.require(binary, lock)
    result = proc.run([str(exe), *args], check=False, timeout=timeout, env=env(lock), cwd=cwd,
                      input=input_text, what=f"{binary} {args[0] if args else ''}".strip())
    if check and result.returncode != 0:
        raise UserError(f"{binary} {args[0]} failed: {first_error_line(result.stderr or result.stdout)}")
    return result


def template_args(chart: Path | str | None = None, *args: str, release: str = api.RELEASE,
                  namespace: str = api.NAMESPACE, include_crds: bool = False,
                  kube_version: str | None = None, include_tests: bool = False) -> list[str]:
    """The one `helm template` command line: RELEASE of CHART (default: the working tree's chart) into
    NAMESPACE, then ARGS (values files, --set, --show-only); the caller runs it with `run`. Without
    include_tests it leaves out the chart's `helm test` hook, as `helm install` creates none of it."""
    line = ["template", release, str(chart if chart is not None else paths.chart_dir()), "--namespace", namespace]
    if include_crds:
        line.append("--include-crds")
    if not include_tests:
        line.append("--skip-tests")
    if kube_version:
        line += ["--kube-version", kube_version]
    return [*line, *args]


class Release:
    """A helm release on a live cluster (KUBECONFIG and, optionally, CONTEXT): the one place the command
    line of `helm install/upgrade/rollback/uninstall/test`, its server-side dry run and the release's reads
    is built. A line is BINARY (the pinned helm, or helm3), the verb, the release, the arguments, its
    namespace, then --kubeconfig/--kube-context; `run` waits for one, `start` streams one to a file."""

    def __init__(self, kubeconfig: Path | str | None = None, context: str | None = None, name: str = api.RELEASE,
                 namespace: str = api.NAMESPACE, lock: lockmod.Lock | None = None, binary: str = "helm") -> None:
        self.kubeconfig, self.context = kubeconfig, context
        self.name, self.namespace = name, namespace
        self.lock, self.binary = lock, binary

    def using(self, binary: str) -> Release:
        """The same release, driven by another helm (helm3)."""
        return Release(self.kubeconfig, self.context, self.name, self.namespace, self.lock, binary)

    def line(self, *args: str) -> list[str]:
        """`helm ARGS` against this cluster, any verb (list -A, history): the pinned binary, ARGS, the cluster."""
        return [str(tools.require(self.binary, self.lock)), *args,
                *(["--kubeconfig", str(self.kubeconfig)] if self.kubeconfig else []),
                *(["--kube-context", self.context] if self.context else [])]

    def _verb(self, verb: str, *args: str) -> list[str]:
        return self.line(verb, self.name, *args, "-n", self.namespace)

    def install(self, *args: str) -> list[str]:
        """`helm install` of the release: ARGS are the chart, values and flags (--wait, --create-namespace)."""
        return self._verb("install", *args)

    def upgrade(self, *args: str) -> list[str]:
        return self._verb("upgrade", *args)

    def rollback(self, revision: str | int, *args: str) -> list[str]:
        return self._verb("rollback", str(revision), *args)

    def uninstall(self, *args: str) -> list[str]:
        return self._verb("uninstall", *args)

    def test(self, *args: str) -> list[str]:
        return self._verb("test", *args)

    def history(self) -> list[str]:
        return self._verb("history", "-o", "json")

    def manifest(self) -> list[str]:
        """`helm get manifest`: the objects the release owns."""
        return self.line("get", "manifest", self.name, "-n", self.namespace)

    def dry_run(self, verb: str, chart: Path | str | None, *args: str) -> list[str]:
        """`helm VERB` (install or upgrade) of CHART (default: the working tree's) as a server-side dry run:
        the API server's admission and the chart's lookups run, nothing is stored."""
        return self._verb(verb, str(chart if chart is not None else paths.chart_dir()), *args, "--dry-run=server")

    def run(self, line: list[str], check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
        """Run LINE (one of the above); with CHECK a failure is a UserError with helm's message."""
        verb = line[1] if len(line) > 1 else ""
        result = proc.run(line, check=False, timeout=timeout, env=env(self.lock), what=f"{self.binary} {verb}")
        if check and result.returncode != 0:
            raise UserError(f"{self.binary} {verb} failed: {first_error_line(result.stderr or result.stdout)}")
        return result

    def start(self, line: list[str], sink: IO[str]) -> subprocess.Popen:
        """Start LINE with its output (both streams) written to SINK, a file: helm never blocks on a pipe."""
        return proc.start(line, stdout=sink, stderr=proc.STDOUT, stdin=proc.DEVNULL, env=env(self.lock),
                          what=f"{self.binary} {line[1] if len(line) > 1 else ''}".strip())


# helm's wrapper around a chart's `fail`: the template it names is where the check was included from,
# often not the one the values concern; the chart's message names the values key itself
_CHART_FAIL = re.compile(r"execution error at \([^)]*\): ([^\n]*)")


def chart_error(text: str | None) -> str | None:
    """The chart's own `fail` message in helm/kustomize output, whole and without helm's wrapper (the
    template and position it names); None when the chart did not fail."""
    match = _CHART_FAIL.search(text or "")
    return match.group(1).strip() if match else None


def first_error_line(text: str) -> str:
    """The line of helm/kustomize output that says what went wrong: the chart's `fail` message when
    there is one, else the first error line."""
    return chart_error(text) or output_line(text)
