"""trainenv.package_venv: one venv per image's packages, made once even when several processes ask at once."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

from trainstack import trainenv


def test_two_askers_at_once_get_one_venv_made_once(monkeypatch, tmp_path):
    monkeypatch.setenv("TRAINSTACK_CACHE", str(tmp_path))
    made: list[str] = []

    def fake_venv(cmd, check=False, **_):  # `python -m venv ROOT`: a python file is all package_venv looks at
        python = Path(cmd[-1]) / "bin" / "python"
        python.parent.mkdir(parents=True)
        python.write_text("")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    def slow_install(*requirements, python=None, no_deps=False):
        made.append(python)
        time.sleep(0.5)  # long enough for the other asker to arrive while this one installs
        return subprocess.CompletedProcess(["install"], 0, "", "")

    monkeypatch.setattr(trainenv.proc, "run", fake_venv)
    monkeypatch.setattr(trainenv, "_install_offline", slow_install)
    got: list[Path] = []
    askers = [threading.Thread(target=lambda: got.append(trainenv.package_venv("jax-cpu", ["jax==0.1"])))
              for _ in range(2)]
    for asker in askers:
        asker.start()
    for asker in askers:
        asker.join()
    assert len(made) == 1  # the second waited for the first, then reused its venv (no rmtree under it)
    assert got[0] == got[1] and got[0].exists()
    assert (got[0].parent.parent / ".trainstack-installed").read_text() == "jax==0.1\n"
