"""The configuration of the Kueue the chart installs: upstream's default at the pinned Kueue, plus
trainstack's own keys.

The Kueue chart takes its controller configuration as one YAML string
(`kueue.managerConfig.controllerManagerConfigYaml` in the umbrella's values.yaml), and a subchart's
values cannot be templated from other values, so the string is written out in values.yaml. Each of
its parts has one source:
- upstream's part is the pinned Kueue chart's default (`managerConfig.controllerManagerConfigYaml` in
  its values.yaml, read from the built archive): `make generate` writes it, `make verify` fails while a
  Kueue bump has not been generated;
- trainstack's part (the keys in OURS) is written by hand in values.yaml and kept as it is.

A key in the string that is neither upstream's nor in OURS is refused in one line: it would be lost
at the next generate.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.error import YAMLError
from ruamel.yaml.scalarstring import LiteralScalarString

from . import lock as lockmod
from . import paths
from .errors import UserError
from .locksync import round_trip  # values.yaml's one round-trip layout

# trainstack's keys of Kueue's Configuration: all-or-nothing admission (docs/scheduling.md).
OURS = ("waitForPodsReady",)
# Where trainstack's keys go when upstream has none of them: before this key, else at the end.
BEFORE = "integrations"
VALUES = "charts/trainstack/values.yaml"
KEY = "kueue.managerConfig.controllerManagerConfigYaml"


def _yaml() -> YAML:
    y = YAML()
    y.preserve_quotes = True
    y.width = 4096
    y.indent(mapping=2, sequence=2, offset=0)  # Kueue's own layout: list items at the key's indent
    return y


def _dump(data) -> str:
    out = io.StringIO()
    _yaml().dump(data, out)
    return out.getvalue().rstrip("\n")


def upstream_default(root: Path, lock: lockmod.Lock) -> str:
    """The pinned Kueue chart's default configuration string, from the archive `trainstack deps` built."""
    pin = lock.chart("kueue")
    archive = root / "charts" / "trainstack" / "charts" / f"kueue-{pin.version}.tgz"
    if not archive.is_file():
        raise UserError(f"{archive.relative_to(root)}: not built", "run 'make setup-chart' (trainstack deps)")
    with tarfile.open(archive) as tar:
        member = tar.extractfile("kueue/values.yaml")
        if member is None:
            raise UserError(f"{archive.relative_to(root)}: no kueue/values.yaml")
        values = YAML(typ="safe").load(member.read())
    try:
        text = values["managerConfig"]["controllerManagerConfigYaml"]
    except (KeyError, TypeError):
        raise UserError(f"{archive.relative_to(root)}: kueue/values.yaml has no managerConfig.controllerManagerConfigYaml",
                        "the Kueue chart changed how it takes its configuration: update trainstack.kueueconfig") from None
    if not isinstance(text, str):
        raise UserError(f"{archive.relative_to(root)}: managerConfig.controllerManagerConfigYaml is not a string")
    return text


def merge(upstream: str, current: str, where: str = f"{VALUES}: {KEY}") -> str:
    """Upstream's configuration (its keys in its order, its comments dropped: they describe upstream's
    defaults, not what the chart runs) with trainstack's keys (OURS) taken from CURRENT."""
    y = _yaml()
    base = YAML(typ="safe").load(upstream)
    try:
        mine = y.load(current) if current.strip() else {}
    except YAMLError as exc:
        raise UserError(f"{where}: not YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(base, dict) or not isinstance(mine, dict):
        raise UserError(f"{where}: not a mapping (a Kueue Configuration)")
    stray = [k for k in mine if k not in OURS and k not in base]
    if stray:
        raise UserError(f"{where}: key {stray[0]} is neither upstream's default nor trainstack's ({', '.join(OURS)})",
                        "add it to trainstack.kueueconfig.OURS, or remove it (make generate would drop it)")
    ours = {k: mine[k] for k in OURS if k in mine}
    keys = [k for k in base if k not in ours]
    at = keys.index(BEFORE) if BEFORE in keys else len(keys)
    merged = CommentedMap()
    for key in keys[:at]:
        merged[key] = base[key]
    merged.update(ours)
    for key in keys[at:]:
        merged[key] = base[key]
    return _dump(merged)


def values_yaml(text: str, upstream: str) -> str:
    """values.yaml's text with the configuration string regenerated (everything else kept as it is)."""
    def edit(values) -> None:
        try:
            parent = values["kueue"]["managerConfig"]
            current = parent["controllerManagerConfigYaml"]
        except (KeyError, TypeError):
            raise UserError(f"{VALUES}: no {KEY}", "the Kueue chart takes its configuration there") from None
        parent["controllerManagerConfigYaml"] = LiteralScalarString(merge(upstream, str(current)))

    return round_trip(text, edit)


def write(root: Path | None = None, lock: lockmod.Lock | None = None, check: bool = False) -> bool:
    """Regenerate the string in values.yaml (with check, only compare); whether it was stale."""
    root = root or paths.repo_root()
    lock = lock or lockmod.load(root / "trainstack.lock.yaml")
    path = root / VALUES
    text = path.read_text()
    new = values_yaml(text, upstream_default(root, lock))
    if new != text and not check:
        path.write_text(new)
    return new != text
