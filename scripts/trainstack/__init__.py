"""trainstack: a Helm/GitOps platform distribution of Kubeflow Trainer."""

# One version, one place: the newest release in releases.yaml. `make generate` writes it into
# _version.py (and Chart.yaml's `version`) rather than this package reading releases.yaml when it
# runs, because an installed wheel has no releases.yaml and setuptools reads the package's version
# from _version.py (pyproject's dynamic version) when it builds one; `make verify` fails when the
# written copies are stale.
from ._version import __version__

__all__ = ["__version__"]
