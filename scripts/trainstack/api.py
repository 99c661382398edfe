"""Names of the platform that every layer shares: the release, the namespaces, the API groups
and versions, and the labels the controllers read. One place; nothing else spells them."""

from __future__ import annotations

RELEASE = "trainstack"                      # the Helm release name trainstack installs and renders
NAMESPACE = "kubeflow-system"               # where the controllers run (upstream's namespace)
PART_OF = ("app.kubernetes.io/part-of", "trainstack")

TRAINER_GROUP = "trainer.kubeflow.org"
TRAINER_VERSION = "v1alpha1"                # TrainJob and (Cluster)TrainingRuntime in Trainer v2.3.0
TRAINER_API = f"{TRAINER_GROUP}/{TRAINER_VERSION}"
FRAMEWORK_LABEL = f"{TRAINER_GROUP}/framework"
ANCESTOR_LABEL = f"{TRAINER_GROUP}/trainjob-ancestor-step"

JOBSET_GROUP = "jobset.x-k8s.io"
JOBSET_API = f"{JOBSET_GROUP}/v1alpha2"
LWS_GROUP = "leaderworkerset.x-k8s.io"
LWS_API = f"{LWS_GROUP}/v1"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
KUEUE_GROUP = "kueue.x-k8s.io"
QUEUE_LABEL = f"{KUEUE_GROUP}/queue-name"
# The native gang scheduler of Kubernetes 1.36 (alpha; docs/scheduling.md): Workload and PodGroup.
GANG_GROUP = "scheduling.k8s.io"
GANG_VERSION = "v1alpha2"
PODGROUPS = f"podgroups.{GANG_VERSION}.{GANG_GROUP}"
WORKLOADS = f"workloads.{GANG_VERSION}.{GANG_GROUP}"
