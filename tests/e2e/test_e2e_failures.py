"""The e2e failure paths: a controller that cannot start, a port already taken (failing pods:
tests/integration/test_suite_failure.py, on the integration tier's shared platform)."""

from __future__ import annotations

import shutil
import socket
import time

import pytest

from support.cli import run_cli
from trainstack import paths
from trainstack.cluster.local import pid_alive
from trainstack.e2e import base as basemod
from trainstack.e2e import suite as suitemod
from trainstack.e2e.providers.local import LocalProvider

from .conftest import ONE_REAL_NODE, need_binaries

# the first real-node group (tests/e2e/conftest.py): KWOK clusters only, moved there to even the groups out

pytestmark = pytest.mark.e2e


def test_a_controller_that_cannot_start_stops_the_suite_with_its_log():
    # a cluster of its own: the suite must fail at helm install and tear everything down
    need_binaries("trainer-controller-manager", "jobset-controller", "kube-apiserver", "kwokctl")
    run_dir = paths.cache_dir() / "e2e" / "pytest-broken-controller"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    provider = LocalProvider(run_dir, real_nodes=ONE_REAL_NODE, controller_args={"trainer-controller-manager": ["--no-such-flag"]})
    suite = suitemod.Suite(provider, "dev", run_dir)
    start = time.monotonic()
    try:
        with pytest.raises(basemod.SuiteFailure) as failure:
            suite.run()
        pids = provider.pids()
    finally:
        provider.down(keep=False)
        shutil.rmtree(run_dir, ignore_errors=True)
    assert time.monotonic() - start < 150, "a broken controller must not make the suite hang"
    message = failure.value.message
    assert message.startswith("helm install: controller kubeflow-trainer"), message
    assert "exited with code" in message and "no-such-flag" in message, message
    results = {s.name: s.result for s in suite.steps}
    assert results["helm install"] == "FAIL" and results["smoke TrainJobs Complete"] == "not run"
    assert pids and not [p for p in pids.values() if pid_alive(p)], "teardown left processes running"


@pytest.mark.slow
def test_a_port_already_taken_is_one_clear_error_and_nothing_starts():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli("e2e", "--provider", "local", "--port-base", str(port), timeout=300)
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and f"port 127.0.0.1:{port} (etcd port) is already in use" in last, last
    assert "Traceback" not in result.stderr
