"""A throwaway signing keyring for the chart's provenance tests (what a release process keeps for real)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

UID = "trainstack {name} test <{name}@trainstack.invalid>"


def gpg_home(tmp_path: Path, name: str) -> tuple[Path, Path, str]:
    """(GNUPGHOME with one signing key, its public keyring file for helm --keyring, the key's e-mail)."""
    assert shutil.which("gpg"), "gpg (GnuPG) is needed to sign charts: apt-get install gnupg"
    home = tmp_path / f"gnupg-{name}"
    home.mkdir(mode=0o700)
    env = {"GNUPGHOME": str(home), "PATH": "/usr/bin:/bin"}
    uid = UID.format(name=name)
    subprocess.run(["gpg", "--batch", "--passphrase", "", "--quick-gen-key", uid, "rsa3072", "sign", "never"],
                   env=env, check=True, capture_output=True, timeout=120)
    pubring = tmp_path / f"{name}.pub.gpg"
    pubring.write_bytes(subprocess.run(["gpg", "--export", uid], env=env, check=True, capture_output=True).stdout)
    return home, pubring, f"{name}@trainstack.invalid"
