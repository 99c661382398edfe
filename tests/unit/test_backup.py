"""`trainstack backup` without a cluster: what a clean manifest keeps and drops, the restore order,
and the one-line errors (the live restore into a fresh cluster is tests/e2e/test_lifecycle.py)."""

from __future__ import annotations

from trainstack import backup

LIVE_TRAINJOB = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
    "metadata": {
        "name": "fit", "namespace": "vision", "uid": "0d0c", "resourceVersion": "42", "generation": 3,
        "creationTimestamp": "2026-12-01T10:00:00Z", "managedFields": [{"manager": "kubectl"}],
        "finalizers": ["trainer.kubeflow.org/resources"],
        "ownerReferences": [{"kind": "Workflow", "name": "w", "uid": "1"}],
        "labels": {"team": "vision"},
        "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "note": "keep me"},
    },
    "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2}},
    "status": {"conditions": [{"type": "Complete", "status": "True"}]},
}


def test_clean_keeps_what_a_user_wrote_and_drops_what_the_server_set() -> None:
    out = backup.clean(LIVE_TRAINJOB)
    assert out == {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "fit", "namespace": "vision", "labels": {"team": "vision"},
                     "annotations": {"note": "keep me"}},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2}},
    }
    assert LIVE_TRAINJOB["status"] and LIVE_TRAINJOB["metadata"]["uid"]  # the input is not changed


def test_clean_namespace_drops_the_server_label_and_finalizers() -> None:
    ns = {"apiVersion": "v1", "kind": "Namespace",
          "metadata": {"name": "vision", "labels": {"kubernetes.io/metadata.name": "vision", "trainstack.io/team": "vision"}},
          "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}
    assert backup.clean(ns) == {"apiVersion": "v1", "kind": "Namespace",
                                "metadata": {"name": "vision", "labels": {"trainstack.io/team": "vision"}}}


def test_restore_order_namespaces_then_runtimes_then_team_objects_then_trainjobs() -> None:
    files = [backup.NAMESPACES_FILE] + [f for f, *_ in backup.KINDS]
    assert files == sorted(files)
    assert files[0] == "00-namespaces.yaml" and files[-1] == "40-trainjobs.yaml"
