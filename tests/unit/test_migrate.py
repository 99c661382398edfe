"""`trainstack migrate from-upstream`: the handover plan, computed from upstream's pinned chart rendered the
way `helm install` with its defaults would, and from the trainstack chart; bad input without a cluster."""

from __future__ import annotations

from trainstack import migrate

NS = "kubeflow-system"


def by_step(actions: list[migrate.Action]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for a in actions:
        out.setdefault(a.step, []).append(a.target)
    return out


def trainjob(name: str, runtime_name: str, done: bool) -> dict:
    conditions = [{"type": "Complete", "status": "True"}] if done else []
    return {"kind": "TrainJob", "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"runtimeRef": {"name": runtime_name}}, "status": {"conditions": conditions}}


def test_a_workload_is_replaced_only_when_its_selector_differs() -> None:
    def deployment(name: str, instance: str) -> dict:
        return {"kind": "Deployment", "metadata": {"name": name, "namespace": NS},
                "spec": {"selector": {"matchLabels": {"app.kubernetes.io/instance": instance}}}}

    up = [deployment("same", "x"), deployment("moved", "kubeflow-trainer")]
    ours = [deployment("same", "x"), deployment("moved", "trainstack")]
    steps = by_step(migrate.plan(up, ours, NS, "kubeflow-trainer", [], []))
    assert steps["adopt"] == [f"Deployment/{NS}/same"]
    assert steps["replace"] == [f"Deployment/{NS}/moved"]


def test_unfinished_users() -> None:
    jobs = [trainjob("a", "x", False), trainjob("b", "x", True), trainjob("c", "y", False)]
    jobs.append({"kind": "TrainJob", "metadata": {"name": "d", "namespace": "t"},
                 "spec": {"runtimeRef": {"name": "x", "kind": "TrainingRuntime"}}})
    assert migrate.unfinished_users(jobs) == {"x": ["team-a/a"], "y": ["team-a/c"]}
