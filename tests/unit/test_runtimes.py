"""The golden ClusterTrainingRuntimes: what each carries, from values, for every environment."""

from __future__ import annotations

from conftest import ROOT
from trainstack import paths, yamlio

SKELETONS = sorted(paths.runtimes_dir(ROOT).glob("*.yaml"))


def test_every_skeleton_is_a_runtime_with_framework_label():
    for path in SKELETONS:
        skeleton = yamlio.load(path.read_text())
        assert skeleton["kind"] == "ClusterTrainingRuntime", path
        assert skeleton["metadata"]["labels"]["trainer.kubeflow.org/framework"], path
