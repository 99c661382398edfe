"""What upstream Kubeflow Trainer ships at the pinned version, read from its verified source.

The runtimes come from upstream's own chart (charts/kubeflow-trainer in the Trainer module zip
the lock pins, checksum-verified as `trainstack deps` does), rendered by the pinned helm with
every built-in runtime switched on, exactly as upstream's installer Job would apply them. The
example TrainJobs come from examples/yaml in the same zip. Nothing here is a hand-kept list:
when the lock moves to another upstream version, these answers move with it.
"""

from __future__ import annotations

import tempfile
import zipfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

from . import chartpack, deps, helm, yamlio
from . import lock as lockmod
from .errors import UserError
from .jsontypes import dig

CHART = "kubeflow-trainer"
EXAMPLES_DIR = "examples/yaml"
# Switches of upstream's values.yaml that turn on every built-in runtime (the data-cache one
# also needs the cache itself); jobset.install=false because the subcharts are not needed.
ALL_RUNTIMES = ("runtimes.defaultEnabled=true", "dataCache.enabled=true",
                "dataCache.runtimes.torchDistributedWithCache.enabled=true", "jobset.install=false")


@dataclass(frozen=True)
class Example:
    """One YAML document of upstream's examples/yaml."""

    path: str  # inside the module, e.g. examples/yaml/01-multi-node.yaml
    index: int  # document number in the file
    doc: dict

    @property
    def kind(self) -> str:
        return str(self.doc.get("kind", ""))

    @property
    def name(self) -> str:
        return str(dig(self.doc, "metadata", "name", default=""))


def _source(lock: lockmod.Lock) -> lockmod.ModuleSource:
    return lock.chart(CHART).source


def _zip(lock: lockmod.Lock) -> Path:
    return deps._verified_zip(_source(lock))


@lru_cache(maxsize=4)
def _runtimes_cached(lock_path: Path, zip_path: Path, prefix: str) -> tuple[dict, ...]:
    lock = lockmod.load(lock_path)
    with tempfile.TemporaryDirectory(prefix="trainstack-upstream-") as tmp:
        chart = Path(tmp) / CHART
        chartpack.extract_subdir(zip_path, prefix, chart)
        meta_path = chart / "Chart.yaml"
        if not meta_path.is_file():
            raise UserError(f"{prefix}: the pinned Trainer source has no chart there",
                            "check charts.kubeflow-trainer.source.path in trainstack.lock.yaml")
        meta = yamlio.load(meta_path.read_text())
        meta.pop("dependencies", None)  # JobSet and LWS are not needed to render the runtimes
        meta_path.write_text(yaml.safe_dump(meta, sort_keys=False))
        args = ["template", "upstream", str(chart), "--show-only", "templates/runtimes/configmap.yaml"]
        for setting in ALL_RUNTIMES:
            args += ["--set", setting]
        rendered = helm.run(args, lock=lock).stdout
    configmap = next(d for d in yamlio.load_all(rendered) if isinstance(d, dict))
    runtimes = [d for d in yamlio.load_all(configmap["data"]["runtimes.yaml"]) if isinstance(d, dict)]
    if not runtimes:
        raise UserError(f"{prefix}: upstream's chart rendered no runtimes", "its runtime switches changed")
    return tuple(runtimes)


def runtimes(lock: lockmod.Lock | None = None) -> dict[str, dict]:
    """Every ClusterTrainingRuntime upstream's chart ships at the pinned version, by name."""
    lock = lock or lockmod.load()
    source = _source(lock)
    prefix = f"{source.module}@{source.version}/{source.path}"
    found = _runtimes_cached(lock.path, _zip(lock), prefix)
    return {rt["metadata"]["name"]: rt for rt in found if rt.get("kind") == "ClusterTrainingRuntime"}


def examples(lock: lockmod.Lock | None = None) -> list[Example]:
    """Every YAML document in upstream's examples/yaml at the pinned version."""
    lock = lock or lockmod.load()
    source = _source(lock)
    prefix = f"{source.module}@{source.version}/{EXAMPLES_DIR}/"
    found = []
    with zipfile.ZipFile(_zip(lock)) as archive:
        for name in sorted(n for n in archive.namelist() if n.startswith(prefix) and n.endswith((".yaml", ".yml"))):
            text = archive.read(name).decode()
            for index, doc in enumerate(yamlio.load_all(text)):
                if isinstance(doc, dict):
                    found.append(Example(path=name[len(source.module) + len(source.version) + 2:], index=index, doc=doc))
    return found
