"""examples/pipelines: the training step as a Kubeflow Pipelines component, and the example pipeline.

Offline: the pipeline compiles to KFP IR with kfp's compiler and the IR says what a platform team
relies on (steps and their order, the step's inputs and outputs, images and the SDK pin from the
lock, caching and retries); bad input fails the step, run by kfp.local, with one line; the data and
evaluation steps score a real checkpoint of examples/train_ddp.py.

On a real API server whose Trainer controller the test plays: submit, wait, failure reasons, policy
denials, the three steps in order. On the real-node cluster (tests/e2e/test_real_platform.py): the
whole pipeline trains on real pods and evaluates the real checkpoint.
"""

# No `from __future__ import annotations`: the pipeline defined in a test needs real annotations (kfp).


import pytest
import yaml

from support.cli import run_cli
from support.pipelines import tp


@pytest.mark.slow
def test_rbac_manifests_validate(tmp_path):
    path = tmp_path / "rbac.yaml"
    path.write_text(yaml.safe_dump_all(tp.rbac_manifests("team-b")))
    result = run_cli("validate", str(path), str(tp.RBAC), timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


# ---- the steps, run by kfp.local ------------------------------------------------------------------

def teardown_module() -> None:
    # kfp.local keeps its settings in a process-wide singleton; leave nothing for other tests
    from kfp.local import config

    config.LocalExecutionConfig.instance = None
