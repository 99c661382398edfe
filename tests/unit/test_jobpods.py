"""e2e/jobpods.py: a pod's first failed container log is read once, while the kubelet still has it."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

from trainstack.e2e.jobpods import FirstFailures, ended_after


def pod(name: str, restarts: int, exit_code: int | None = None) -> dict:
    status = {"name": "node", "restartCount": restarts}
    if exit_code is not None:
        status["lastState"] = {"terminated": {"exitCode": exit_code, "reason": "Error"}}
    return {"metadata": {"name": name}, "status": {"containerStatuses": [status]}}


class Kube:
    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def kubectl(self, *args: str, check: bool = True):
        self.calls.append(args)
        return SimpleNamespace(stdout="step 40\nRuntimeError: Connection closed by peer\n")


def test_each_restarted_pods_previous_log_is_read_once_and_summarised():
    kube = Kube()
    pods = [pod("job-node-0-0", 0), pod("job-node-0-1", 1, exit_code=1)]
    first = FirstFailures(kube, "smoke", lambda: pods)
    first.check(object())  # the SDK passes the TrainJob
    first.check()
    assert kube.calls == [("logs", "job-node-0-1", "-n", "smoke", "-c", "node", "--previous", "--tail", "40")]
    assert first.found == {"job-node-0-1": {"exit_code": 1, "reason": "Error", "restarts": 1,
                                            "log": ["step 40", "RuntimeError: Connection closed by peer"]}}
    assert first.summary() == ("job-node-0-1's first container ended with exit 1 (Error): "
                               "RuntimeError: Connection closed by peer")
    pods[1] = pod("job-node-0-1", 4, exit_code=1)  # later restarts: the first failure's log is the one kept
    first.check()
    assert len(kube.calls) == 1


def test_pods_that_cannot_be_read_are_read_at_the_next_poll():
    from trainstack.errors import UserError

    def unreadable():
        raise UserError("the API server did not answer")

    first = FirstFailures(Kube(), "smoke", unreadable)
    first.check()
    assert first.found == {} and first.summary() == ""


def _ended(*finished: str | None) -> list[dict]:
    """One pod whose containers ended at FINISHED (None: still running)."""
    states = [{"terminated": {"exitCode": 0, "finishedAt": f}} if f else {"running": {}} for f in finished]
    return [{"status": {"containerStatuses": [{"name": f"c{i}", "state": s} for i, s in enumerate(states)]}}]


def test_ended_after_needs_every_container_ended_at_that_second_or_later():
    back = datetime(2026, 12, 7, 9, 0, 5, 400_000, tzinfo=UTC)
    assert ended_after(_ended("2026-12-07T09:00:05Z", "2026-12-07T09:00:30Z"), back)  # the same second counts
    assert not ended_after(_ended("2026-12-07T09:00:04Z", "2026-12-07T09:00:30Z"), back)  # one ended before
    assert not ended_after(_ended("2026-12-07T09:00:30Z", None), back)  # one still running
    assert not ended_after([], back) and not ended_after(_ended(), back)  # nothing ended proves nothing
