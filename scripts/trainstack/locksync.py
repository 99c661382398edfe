"""`trainstack lock sync [--check]`: write the versions the lock pins into the files that must
carry them, so each version is written once (in trainstack.lock.yaml) and nowhere by hand.

What is written from where:
- charts/trainstack/Chart.yaml: each dependency's version and repository (lock `charts`), and
  appVersion (the Trainer controller's image tag) and kubeVersion (kubernetes.supported);
- charts/trainstack/values.yaml: every `images.<name>` entry (lock `images`), and the image keys
  of the upstream subcharts (`kubeflow-trainer.image`, `jobset.image`, `lws.image.manager`,
  `kueue.controllerManager.manager.image`), comments and order kept (round-trip YAML);
- charts/trainstack/README.header.md: the version column of the dependency table;
- pyproject.toml: requires-python, dependencies and the test and train extras (lock `python`).

`--check` (and `trainstack lock check`) writes nothing and names each stale file.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from pathlib import Path

from ruamel.yaml import YAML

from . import lock as lockmod
from . import paths
from .errors import UserError

# Subchart -> (lock image, dotted key of its image block in the umbrella values, registry split?):
# upstream's Trainer chart has registry/repository/tag; JobSet, LWS and Kueue put the registry in
# the repository.
SUBCHART_IMAGES = {
    "kubeflow-trainer": ("trainer-controller-manager", "image", True),
    "jobset": ("jobset-controller", "image", False),
    "lws": ("lws-controller", "image.manager", False),
    "kueue": ("kueue-controller", "controllerManager.manager.image", False),
}
TRAINER_IMAGE = "trainer-controller-manager"


def _yaml() -> YAML:
    y = YAML()
    y.preserve_quotes = True
    y.width = 4096
    y.indent(mapping=2, sequence=4, offset=2)
    y.representer.add_representer(type(None), lambda r, _: r.represent_scalar("tag:yaml.org,2002:null", "null"))
    return y


def round_trip(text: str, edit: Callable[[object], None]) -> str:
    y = _yaml()
    data = y.load(text)
    edit(data)
    out = io.StringIO()
    y.dump(data, out)
    return out.getvalue()


def _dig(data, dotted: str, where: str):
    node = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise UserError(f"{where}: no key {dotted}", "the file's layout changed: update trainstack.locksync")
        node = node[part]
    return node


def chart_yaml(text: str, lock: lockmod.Lock, where: str) -> str:
    def edit(chart) -> None:
        deps = {d["name"]: d for d in chart.get("dependencies") or []}
        for pin in lock.charts():
            if pin.name not in deps:
                raise UserError(f"{where}: dependencies has no {pin.name}, which the lock pins",
                                "add the dependency (its condition and comment are the chart's own)")
            deps[pin.name]["version"] = pin.version
            deps[pin.name]["repository"] = pin.oci
        chart["appVersion"] = lock.image(TRAINER_IMAGE).tag
        chart["kubeVersion"] = lock.kubernetes_constraint

    return round_trip(text, edit)


def values_yaml(text: str, lock: lockmod.Lock, where: str) -> str:
    def edit(values) -> None:
        pinned = {image.name: image for image in lock.images()}
        for name, entry in (values.get("images") or {}).items():
            if name not in pinned:
                raise UserError(f"{where}: images.{name} is not pinned in the lock's images")
            image = pinned[name]
            entry["registry"], entry["repository"], entry["tag"] = image.registry, image.repository, image.tag
            entry["digest"] = image.digest
        for chart, (image_name, key, split) in SUBCHART_IMAGES.items():
            if chart not in values or chart not in {c.name for c in lock.charts()}:
                continue
            block = _dig(values, f"{chart}.{key}", where)
            image = lock.image(image_name)
            if split:
                block["registry"], block["repository"] = image.registry, image.repository
            else:
                block["repository"] = f"{image.registry}/{image.repository}"
            block["tag"] = image.tag

    return round_trip(text, edit)


def readme_header(text: str, lock: lockmod.Lock, where: str) -> str:
    out = text
    for pin in lock.charts():
        row = re.compile(rf"^(\| `{re.escape(pin.name)}` \| )[^|]+( \|)", re.MULTILINE)
        if row.search(out) is None:
            raise UserError(f"{where}: the dependency table has no row for {pin.name}")
        out = row.sub(rf"\g<1>{pin.version}\g<2>", out)  # a chart version (semver) has no backslash
    return out


def _toml_list(name: str, requirements: dict) -> str:
    items = "".join(f'  "{package}{spec}",\n' for package, spec in requirements.items())
    return f"{name} = [\n{items}]"


def pyproject(text: str, lock: lockmod.Lock, where: str) -> str:
    python = lock.get("python")
    out = text

    def replace(pattern: str, new: str, what: str) -> None:
        nonlocal out
        found = re.compile(pattern, re.MULTILINE | re.DOTALL)
        if found.search(out) is None:
            raise UserError(f"{where}: no {what} to write")
        out = found.sub(lambda _: new, out, count=1)

    replace(r'^requires-python = "[^"]*"', f'requires-python = "{python["requires-python"]}"', "requires-python")
    replace(r"^dependencies = \[\n.*?^\]", _toml_list("dependencies", python["dependencies"]), "dependencies")
    for extra in ("test", "train"):
        replace(rf"^{extra} = \[\n.*?^\]", _toml_list(extra, python[extra]), f"optional-dependencies.{extra}")
    return out


TARGETS: list[tuple[str, Callable[[str, lockmod.Lock, str], str]]] = [
    ("charts/trainstack/Chart.yaml", chart_yaml),
    ("charts/trainstack/values.yaml", values_yaml),
    ("charts/trainstack/README.header.md", readme_header),
    ("pyproject.toml", pyproject),
]


def sync(root: Path | None = None, lock: lockmod.Lock | None = None, check: bool = False) -> list[str]:
    """Write (or, with check, only compare) every target; the relative paths that were stale."""
    root = root or paths.repo_root()
    lock = lock or lockmod.load(root / "trainstack.lock.yaml")
    stale = []
    for rel, render in TARGETS:
        path = root / rel
        text = path.read_text()
        new = render(text, lock, rel)
        if new != text:
            stale.append(rel)
            if not check:
                path.write_text(new)
    return stale
