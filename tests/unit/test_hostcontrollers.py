"""The chart's controllers as local processes (e2e/hostcontrollers.py), without a cluster: a controller
that exits before it is ready is started again, as the kubelet restarts a Deployment's pod, with the log
of each run kept, and one that cannot start fails with its log after START_ATTEMPTS starts."""

from __future__ import annotations

import subprocess
import sys

import pytest

from trainstack.e2e import hostcontrollers as hc
from trainstack.errors import UserError


def _controllers(tmp_path, monkeypatch, exits_first: int):
    """One controller whose first EXITS_FIRST starts exit at once (code 1, a line in its log); later
    starts stay up and are ready."""
    ctl = hc.HostController(deployment="trainer", namespace="ns", binary_name="trainer-controller-manager",
                            service_account="sa", selector={}, pod_labels={}, config={}, extra_args=[],
                            workdir=tmp_path)
    controllers = hc.HostControllers(cluster=None, namespace="ns", workdir=tmp_path)  # type: ignore[arg-type]
    controllers.controllers = [ctl]
    starts = []

    def start():
        for c in controllers.controllers:
            starts.append(c.deployment)
            code = "import sys; print('ERROR cache sync timed out'); sys.exit(1)" if len(starts) <= exits_first \
                else "import time; time.sleep(30)"
            with c.log.open("w") as sink:
                sink.write("$ trainer\n")
                sink.flush()
                c.process = subprocess.Popen([sys.executable, "-c", code], stdout=sink, stderr=subprocess.STDOUT)
            c.pid = c.process.pid
            if len(starts) <= exits_first:
                c.process.wait(timeout=10)

    monkeypatch.setattr(controllers, "start", start)
    monkeypatch.setattr(hc.HostController, "readyz", lambda self: self.process is not None and self.process.poll() is None)
    return controllers, ctl, starts


@pytest.mark.parametrize("exits_first", [0, 2])
def test_a_controller_that_exits_at_start_is_started_again_with_its_logs_kept(tmp_path, monkeypatch, exits_first):
    controllers, ctl, starts = _controllers(tmp_path, monkeypatch, exits_first)
    try:
        controllers.start()
        controllers.wait_ready(timeout=20)
        assert len(starts) == exits_first + 1 and ctl.process.poll() is None
        kept = sorted(tmp_path.glob("trainer.*.log"))
        assert len(kept) == exits_first and all("cache sync timed out" in k.read_text() for k in kept)
    finally:
        if ctl.process is not None:
            ctl.process.kill()


def test_a_controller_that_exits_at_every_start_fails_with_its_log(tmp_path, monkeypatch):
    controllers, _, starts = _controllers(tmp_path, monkeypatch, exits_first=hc.START_ATTEMPTS)
    controllers.start()
    with pytest.raises(UserError) as err:
        controllers.wait_ready(timeout=20)
    assert len(starts) == hc.START_ATTEMPTS  # no more starts after the last
    assert "trainer" in str(err.value) and "cache sync timed out" in str(err.value)  # which, and its log's error
