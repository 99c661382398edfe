"""The git side of `e2e --gitops`: a bare repository made from this checkout's tree (tracked and
untracked-not-ignored files, committed plus uncommitted), a work clone to commit on, and the URL the
git daemon serves it at inside the cluster's network namespace."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from .. import proc
from ..errors import UserError

GIT_PORT = 9418
GIT_URL = f"git://127.0.0.1:{GIT_PORT}/trainstack.git"
BRANCH = "main"


def _git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "trainstack e2e", "GIT_AUTHOR_EMAIL": "e2e@trainstack.invalid",
           "GIT_COMMITTER_NAME": "trainstack e2e", "GIT_COMMITTER_EMAIL": "e2e@trainstack.invalid",
           "PATH": "/usr/bin:/bin", "HOME": str(repo)}
    result = proc.run(["git", "-C", str(repo), *args], check=False, env=env)
    if result.returncode != 0:
        raise UserError(f"git {' '.join(args[:2])} failed in {repo}: {(result.stderr or result.stdout).strip()[-300:]}")
    return result.stdout


class GitRepo:
    """A bare repository of the checkout's current tree (never the checkout's own .git) and a work clone."""

    def __init__(self, workdir: Path) -> None:
        self.bare = workdir / "git" / "trainstack.git"
        self.work = workdir / "git-work"

    def snapshot(self, root: Path) -> str:
        """Copy what git tracks plus untracked files it does not ignore, commit it on `main`."""
        listed = proc.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                          check=False)
        if listed.returncode != 0:
            raise UserError(f"{root} is not a git checkout: {listed.stderr.strip()}",
                            "e2e --gitops serves this checkout's tree from a git repository")
        shutil.rmtree(self.work, ignore_errors=True)
        self.work.mkdir(parents=True)
        for rel in sorted({p for p in listed.stdout.split("\0") if p}):
            src = root / rel
            if not src.exists() and not src.is_symlink():
                continue  # deleted, not yet committed
            dest = self.work / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            if src.is_symlink():
                dest.symlink_to(src.readlink())
            elif src.is_file():
                shutil.copy2(src, dest)
        _git(self.work, "init", "-q", "-b", BRANCH)
        _git(self.work, "add", "-A")
        _git(self.work, "commit", "-q", "-m", "trainstack: the checkout's tree")
        shutil.rmtree(self.bare, ignore_errors=True)
        self.bare.parent.mkdir(parents=True, exist_ok=True)
        proc.run(["git", "clone", "-q", "--bare", str(self.work), str(self.bare)])
        _git(self.work, "remote", "add", "origin", str(self.bare))
        return self.head()

    def commit(self, message: str, edit: Callable[[Path], None]) -> str:
        edit(self.work)
        _git(self.work, "add", "-A")
        _git(self.work, "commit", "-q", "-m", message)
        _git(self.work, "push", "-q", "origin", BRANCH)
        return self.head()

    def head(self) -> str:
        return _git(self.work, "rev-parse", "HEAD").strip()


