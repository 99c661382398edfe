"""trainstack: a Helm/GitOps platform distribution of Kubeflow Trainer."""

__version__ = "0.1.0"
