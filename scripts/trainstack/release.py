"""Releases of the trainstack chart: the record in releases.yaml, CHANGELOG.md made from it, and checks.

`releases.yaml` (tracked, beside CHANGELOG.md) is the record the tooling reads, because git tags
do not travel with every clone: newest first, each release with its semver `version`, the `commit`
it was cut from, its `date`, what changed for users and what to do on upgrade. At most one entry,
the first, has no `commit` yet: the next release, being prepared. CHANGELOG.md is generated from it
(`trainstack release changelog`), never written by hand.

The newest entry's version is the version of the working tree: `make generate` writes it into
Chart.yaml's `version` and the package's `_version.py` (write_version), so neither is edited by hand.

`trainstack release check` fails when the chart (charts/trainstack, its runtimes and policies included,
and the charts and images the lock pins for it) changed since the last release's commit but
Chart.yaml's version or the changelog did not. A tag `v<version>`, where present, must point at the
release's commit; it is a convenience, not the record.
"""

from __future__ import annotations

import datetime as dt
import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from . import paths, proc, yamlio
from .errors import UserError, output_line

RELEASES_FILE = "releases.yaml"
CHANGELOG_FILE = "CHANGELOG.md"
# What a user installs when they install the chart: the chart folder (its runtimes and policies are chart
# files; releases up to 0.2.0 linked them in from runtimes/ and policies/, still compared) and the lock sections
# that decide its dependencies and images.
CHART_PATHS = ("charts/trainstack", "runtimes", "policies")
LOCK_SECTIONS = ("charts", "images")
SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-([0-9A-Za-z.-]+))?$")
COMMIT = re.compile(r"^[0-9a-f]{40}$")


@dataclass
class Release:
    version: str
    commit: str = ""  # empty: not cut yet (the next release)
    date: str = ""
    changes: list[str] = field(default_factory=list)
    upgrade: list[str] = field(default_factory=list)
    breaking: bool = False

    @property
    def cut(self) -> bool:
        return bool(self.commit)


def semver_key(version: str) -> tuple:
    """Order of semver versions (a pre-release sorts before its release)."""
    match = SEMVER.match(version)
    if not match:
        raise ValueError(version)
    major, minor, patch, pre = match.groups()
    pre_key: tuple = (1,) if pre is None else (0, *[(0, int(p)) if p.isdigit() else (1, p) for p in pre.split(".")])
    return (int(major), int(minor), int(patch), pre_key)


def required_bump(previous: str, new: str) -> str:
    """'major' | 'minor' | 'patch': what kind of bump previous -> new is (semver, 0.x counts minor as major)."""
    p, n = semver_key(previous), semver_key(new)
    if n[0] != p[0]:
        return "major"
    if n[1] != p[1]:
        return "minor"
    return "patch"


def is_breaking_bump(previous: str, new: str) -> bool:
    """A bump semver allows breaking changes in: a new major, or a new minor while the major is 0."""
    bump = required_bump(previous, new)
    return bump == "major" or (bump == "minor" and semver_key(previous)[0] == 0)


# -- the record -------------------------------------------------------------------------------


def releases_path(root: Path | None = None) -> Path:
    return (root or paths.repo_root()) / RELEASES_FILE


def _strings(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise UserError(f"{where} must be a list of non-empty strings")
    return [v.strip() for v in value]


def load(path: Path | None = None) -> list[Release]:
    """The releases in `path` (default releases.yaml at the repository root), newest first, checked."""
    path = path or releases_path()
    try:
        data = yamlio.load(path.read_text())
    except OSError:
        raise UserError(f"{path} not found", "the releases record lives beside CHANGELOG.md") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark else ""
        raise UserError(f"{path}{line}: not valid YAML") from None
    if not isinstance(data, dict) or not isinstance(data.get("releases"), list) or not data["releases"]:
        raise UserError(f"{path}: needs a non-empty 'releases' list")
    out: list[Release] = []
    for i, entry in enumerate(data["releases"]):
        where = f"{path}: releases[{i}]"
        if not isinstance(entry, dict):
            raise UserError(f"{where} must be a mapping")
        unknown = sorted(set(entry) - {"version", "commit", "date", "changes", "upgrade", "breaking"})
        if unknown:
            raise UserError(f"{where}: unknown field(s) {', '.join(unknown)}",
                            "allowed: version, commit, date, changes, upgrade, breaking")
        version = str(entry.get("version", ""))
        if not SEMVER.match(version):
            raise UserError(f"{where}.version '{version}' is not a semver version (MAJOR.MINOR.PATCH)")
        where = f"{path}: release {version}"
        commit = str(entry.get("commit") or "")
        if commit and not COMMIT.match(commit):
            raise UserError(f"{where}: commit '{commit}' must be a full 40-character commit id")
        date = entry.get("date") or ""
        if isinstance(date, dt.date):
            date = date.isoformat()
        if commit and not re.match(r"^\d{4}-\d{2}-\d{2}$", str(date)):
            raise UserError(f"{where}: a cut release needs date: YYYY-MM-DD")
        if not isinstance(entry.get("breaking", False), bool):
            raise UserError(f"{where}: breaking must be true or false")
        release = Release(version=version, commit=commit, date=str(date),
                          changes=_strings(entry.get("changes"), f"{where}: changes"),
                          upgrade=_strings(entry.get("upgrade"), f"{where}: upgrade"),
                          breaking=bool(entry.get("breaking", False)))
        if not release.changes:
            raise UserError(f"{where}: changes must say what changed for users")
        if not release.cut and i != 0:
            raise UserError(f"{where} has no commit but is not the newest entry",
                            "only the next release (the first entry) may be without a commit")
        out.append(release)
    versions = [r.version for r in out]
    for newer, older in itertools.pairwise(out):
        if semver_key(newer.version) <= semver_key(older.version):
            raise UserError(f"{path}: release {newer.version} is listed above {older.version} but is not newer",
                            "list releases newest first, each version greater than the one below")
        if newer.breaking and not is_breaking_bump(older.version, newer.version):
            raise UserError(f"{path}: release {newer.version} is marked breaking, but {older.version} -> "
                            f"{newer.version} is a {required_bump(older.version, newer.version)} bump",
                            "semver: breaking changes need a new major version (a new minor while at 0.x)")
    if len(set(versions)) != len(versions):
        raise UserError(f"{path}: a version is listed twice")
    return out


def last_cut(releases: list[Release]) -> Release | None:
    return next((r for r in releases if r.cut), None)


def previous(root: Path | None = None) -> str:
    """N-1, what upgrades are tested from: the newest cut release older than the working tree's chart
    (N: Chart.yaml's version, pending until cut, or already cut from this tree's history)."""
    root = root or paths.repo_root()
    chart = root / "charts" / "trainstack" / "Chart.yaml"
    current = chart_version(chart.read_text(), str(chart))
    older = [r for r in load(releases_path(root)) if r.cut and r.version != current]
    if not older:
        raise UserError(f"{releases_path(root)}: no cut release before {current} to upgrade from")
    return older[0].version


def pending(releases: list[Release]) -> Release | None:
    return releases[0] if not releases[0].cut else None


# -- CHANGELOG.md -----------------------------------------------------------------------------

CHANGELOG_HEADER = """# Changelog

Generated from `releases.yaml` by `trainstack release changelog`; edit that file, not this one.
Versions follow [semver](https://semver.org): a patch release fixes without changing values or
behaviour users rely on, a minor release adds (while at 0.x it may also break, and says so under
"On upgrade"), a major release may break. Each release names the commit it was cut from:
`trainstack e2e --upgrade-from VERSION` installs the chart from that commit and upgrades it to
the working tree. How to upgrade: [docs/upgrading.md](docs/upgrading.md).
"""


def changelog_text(releases: list[Release]) -> str:
    parts = [CHANGELOG_HEADER]
    for release in releases:
        if release.cut:
            parts.append(f"## {release.version} ({release.date})\n\nCut from commit `{release.commit}`.\n")
        else:
            parts.append(f"## {release.version} (unreleased)\n\nNot cut yet: the next release.\n")
        if release.breaking:
            parts.append("**Breaking**: read \"On upgrade\" before you upgrade.\n")
        parts.append("### What changed for users\n\n" + "".join(f"- {c}\n" for c in release.changes))
        steps = release.upgrade or ["Nothing to do beyond `helm upgrade` (see docs/upgrading.md)."]
        parts.append("### On upgrade\n\n" + "".join(f"- {s}\n" for s in steps))
    return "\n".join(parts)


def write_changelog(root: Path | None = None, check: bool = False) -> bool:
    """Write CHANGELOG.md from releases.yaml; with check, only report whether it is stale."""
    root = root or paths.repo_root()
    text = changelog_text(load(releases_path(root)))
    target = root / CHANGELOG_FILE
    current = target.read_text() if target.is_file() else None
    if current == text:
        return False
    if not check:
        target.write_text(text)
    return True


# -- the version, written from the record ----------------------------------------------------

# Where the version is written from the newest release (`make generate`; `make verify` fails when stale):
# the package's version (trainstack --version, the SARIF driver, pyproject's dynamic version) and the chart's.
VERSION_FILE = "scripts/trainstack/_version.py"
CHART_YAML = "charts/trainstack/Chart.yaml"
VERSION_HEADER = ("# Generated by `make generate` (trainstack.release.write_version) from the newest entry of releases.yaml;\n"
                  "# `make verify` fails when it is stale. Do not edit: add the release to releases.yaml instead.\n")
CHART_VERSION_LINE = re.compile(r"^version:[^\n]*$", re.MULTILINE)


def chart_repository(root: Path | None = None) -> str:
    """releases.yaml's `chartRepository`: where CI publishes the chart, and what the environments name."""
    path = releases_path(root)
    try:
        data = yamlio.load(path.read_text()) or {}
    except (OSError, yaml.YAMLError):
        load(path)  # the same one-line error as every other reader of the record
        raise
    repository = data.get("chartRepository") if isinstance(data, dict) else None
    if not isinstance(repository, str) or not repository.startswith("oci://") or len(repository) <= len("oci://"):
        raise UserError(f"{path}: chartRepository must be an OCI reference (oci://HOST[:PORT]/PATH), "
                        f"not {repository!r}", "it names where CI publishes the chart")
    return repository.rstrip("/")


def current_version(root: Path | None = None) -> str:
    """The version of the working tree: the newest release in releases.yaml (cut or being prepared)."""
    return load(releases_path(root))[0].version


def version_texts(root: Path | None = None) -> dict[str, str]:
    """Each file that carries the version (relative path) and the text it must have."""
    root = root or paths.repo_root()
    version = current_version(root)
    chart_yaml = root / CHART_YAML
    try:
        chart = chart_yaml.read_text()
    except OSError:
        raise UserError(f"{chart_yaml} not found") from None
    if CHART_VERSION_LINE.search(chart) is None:
        raise UserError(f"{chart_yaml}: no top-level 'version:' line to write the release's version into")
    return {VERSION_FILE: f'{VERSION_HEADER}__version__ = "{version}"\n',
            CHART_YAML: CHART_VERSION_LINE.sub(f"version: {version}", chart, count=1)}


def write_version(root: Path | None = None, check: bool = False) -> list[str]:
    """Write the newest release's version into VERSION_FILE and Chart.yaml; the relative paths that were stale."""
    root = root or paths.repo_root()
    stale = []
    for rel, text in version_texts(root).items():
        path = root / rel
        if not path.is_file() or path.read_text() != text:
            stale.append(rel)
            if not check:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
    return stale


# -- git --------------------------------------------------------------------------------------


def git(root: Path, *args: str, check: bool = True) -> proc.CompletedProcess:
    try:
        result = proc.run(["git", "-C", str(root), *args], check=False, timeout=60)
    except proc.CommandError as err:
        if err.missing:
            raise UserError("git is not installed", "release and upgrade checks read the git history") from None
        raise
    if check and result.returncode != 0:
        raise UserError(f"git {' '.join(args[:2])} failed in {root}: {output_line(result.stderr, markers=())}")
    return result


def resolve_commit(root: Path, ref: str) -> str:
    """The full commit id of a git ref; a UserError naming the ref when there is none."""
    if not ref or ref.startswith("-"):
        raise UserError(f"'{ref}' is not a git ref", exit_code=2)
    result = git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False)
    if result.returncode != 0:
        shallow = git(root, "rev-parse", "--is-shallow-repository", check=False).stdout.strip() == "true"
        hint = "this clone is shallow: 'git fetch --unshallow' brings the history" if shallow else \
            "use a release from releases.yaml, a tag, a branch or a commit id of this repository"
        raise UserError(f"unknown git ref '{ref}' in {root}", hint, exit_code=2)
    return result.stdout.strip()


def resolve(root: Path, version_or_ref: str) -> tuple[str, str]:
    """(commit, label) for a release version from releases.yaml, else any git ref."""
    path = releases_path(root)
    if path.is_file():
        for release in load(path):
            if release.version == version_or_ref.removeprefix("v"):
                if not release.cut:
                    raise UserError(f"{path}: release {release.version} is not cut yet (no commit)",
                                    "upgrade from a cut release or a git ref", exit_code=2)
                return resolve_commit(root, release.commit), f"release {release.version}"
    commit = resolve_commit(root, version_or_ref)
    return commit, f"ref {version_or_ref} ({commit[:12]})"


def chart_version(text: str, where: str) -> str:
    try:
        data = yamlio.load(text)
    except yaml.YAMLError:
        raise UserError(f"{where}: not valid YAML") from None
    version = str((data or {}).get("version", "")) if isinstance(data, dict) else ""
    if not SEMVER.match(version):
        raise UserError(f"{where}: version '{version}' is not a semver version")
    return version


def _lock_sections(text: str) -> dict[str, Any]:
    data = yamlio.load(text) or {}
    return {k: data.get(k) for k in LOCK_SECTIONS}


def chart_changes(root: Path, commit: str) -> list[str]:
    """What differs in the chart between `commit` and the working tree (committed, staged, unstaged, new)."""
    changed = git(root, "diff", "--name-only", commit, "--", *CHART_PATHS).stdout.split()
    changed += git(root, "ls-files", "--others", "--exclude-standard", "--", *CHART_PATHS).stdout.split()
    old_lock = git(root, "show", f"{commit}:trainstack.lock.yaml", check=False)
    lock_file = root / "trainstack.lock.yaml"
    if old_lock.returncode == 0 and lock_file.is_file():
        old, new = _lock_sections(old_lock.stdout), _lock_sections(lock_file.read_text())
        changed += [f"trainstack.lock.yaml ({k})" for k in LOCK_SECTIONS if old.get(k) != new.get(k)]
    return sorted(set(changed))


@dataclass
class CheckResult:
    chart_version: str
    last_release: str
    last_commit: str
    pending: str
    changed: list[str]
    problems: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems


def check(root: Path | None = None) -> CheckResult:
    """Everything wrong with the release record against the chart and the git history."""
    root = root or paths.repo_root()
    path = releases_path(root)
    chart_yaml = root / "charts" / "trainstack" / "Chart.yaml"
    releases = load(path)
    try:
        version = chart_version(chart_yaml.read_text(), str(chart_yaml))
    except OSError:
        raise UserError(f"{chart_yaml} not found") from None
    last, next_ = last_cut(releases), pending(releases)
    problems: list[str] = []
    if write_changelog(root, check=True):
        problems.append(f"{root / CHANGELOG_FILE} is stale with {path} (run 'trainstack release changelog')")
    if last is None:
        problems.append(f"{path}: no release has a commit yet; record the first release")
        return CheckResult(version, "", "", next_.version if next_ else "", [], problems)
    missing: set[str] = set()
    for release in (r for r in releases if r.cut):
        exists = git(root, "cat-file", "-e", f"{release.commit}^{{commit}}", check=False).returncode == 0
        if not exists:
            missing.add(release.commit)
            problems.append(f"{path}: release {release.version}: commit {release.commit} is not in this clone's "
                            "history (a shallow clone? 'git fetch --unshallow')")
            continue
        then = git(root, "show", f"{release.commit}:charts/trainstack/Chart.yaml", check=False)
        if then.returncode == 0:
            cut_version = chart_version(then.stdout, f"Chart.yaml at {release.commit[:12]}")
            if cut_version != release.version:
                problems.append(f"{path}: release {release.version}: Chart.yaml at commit {release.commit[:12]} "
                                f"says version {cut_version}")
        tag = git(root, "rev-parse", "--verify", "--quiet", f"refs/tags/v{release.version}^{{commit}}", check=False)
        if tag.returncode == 0 and tag.stdout.strip() != release.commit:
            problems.append(f"tag v{release.version} points at {tag.stdout.strip()[:12]}, but {path} records "
                            f"{release.commit[:12]} for release {release.version}")
    if last.commit in missing:
        return CheckResult(version, last.version, last.commit, next_.version if next_ else "", [], problems)
    changed = chart_changes(root, last.commit)
    if changed:
        shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
        if version == last.version:
            problems.append(f"{chart_yaml}: the chart changed since release {last.version} (commit "
                            f"{last.commit[:12]}: {shown}) but its version is still {version}; add the next "
                            "release (semver) at the top of releases.yaml and run 'make generate', which "
                            "writes its version into Chart.yaml")
        elif semver_key(version) < semver_key(last.version):
            problems.append(f"{chart_yaml}: version {version} is lower than the last release {last.version}")
        if next_ is None:
            problems.append(f"{path}: the chart changed since release {last.version} ({shown}) but there is no "
                            "entry for the next release; add one at the top (version, changes, upgrade)")
        elif version != last.version and next_.version != version:
            problems.append(f"{path}: the next release is {next_.version} but {chart_yaml} says {version}")
    elif version != last.version and (next_ is None or next_.version != version):
        problems.append(f"{chart_yaml}: version {version} is not the last release {last.version}, and "
                        f"{path} has no entry for {version}")
    return CheckResult(version, last.version, last.commit, next_.version if next_ else "", changed, problems)


def cut(root: Path | None = None, commit_ref: str = "HEAD", today: str | None = None) -> Release:
    """Record the next release as cut from `commit_ref`: its commit and date are written into releases.yaml."""
    root = root or paths.repo_root()
    path = releases_path(root)
    releases = load(path)
    next_ = pending(releases)
    if next_ is None:
        raise UserError(f"{path}: there is no next release to cut (every entry has a commit)",
                        "add an entry at the top: version, changes, upgrade")
    commit = resolve_commit(root, commit_ref)
    then = git(root, "show", f"{commit}:charts/trainstack/Chart.yaml", check=False)
    if then.returncode != 0:
        raise UserError(f"commit {commit[:12]} has no charts/trainstack/Chart.yaml")
    version = chart_version(then.stdout, f"Chart.yaml at {commit[:12]}")
    if version != next_.version:
        raise UserError(f"Chart.yaml at {commit[:12]} says version {version}, the next release is {next_.version}",
                        "commit the version bump first, then cut")
    lines = path.read_text().splitlines(keepends=True)
    for i, line in enumerate(lines):
        match = re.match(r"^(\s*)- version:\s*['\"]?" + re.escape(next_.version) + r"['\"]?\s*$", line)
        if match:
            pad = match.group(1) + "  "
            day = today or dt.datetime.now(dt.UTC).date().isoformat()
            lines[i + 1:i + 1] = [f"{pad}commit: {commit}\n", f"{pad}date: {day}\n"]
            break
    else:
        raise UserError(f"{path}: cannot find the line '- version: {next_.version}'")
    path.write_text("".join(lines))
    release = load(path)[0]
    write_changelog(root)
    return release


# -- CLI --------------------------------------------------------------------------------------
