"""Shared by tests/{unit,chart,integration,e2e}/test_pipelines.py and tests/e2e/test_real_platform.py: the example pipeline's
module, and the helpers that run its steps with kfp.local and check that a failing step says one line."""

# No `from __future__ import annotations`: the pipeline defined in `score` needs real annotations (kfp).

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

PIPELINES = ROOT / "examples" / "pipelines"
sys.path.insert(0, str(PIPELINES))

import train_pipeline as tp


def step_fails(capsys, kubeconfig: Path, workdir: Path, **inputs) -> str:
    with pytest.raises(tp.PipelineFailed) as failure:
        tp.run_training_step(kubeconfig, inputs.pop("namespace", "team-a"), workdir=workdir, **inputs)
    log = capsys.readouterr().out
    # The step streams rank 0's log ("[TRAINJOB node-0] ..."): a failing training script's own
    # traceback is the user's to read; the step itself must print none.
    own = "\n".join(ln for ln in log.splitlines() if not re.match(r"^\s*\[\S+ node-\d+\]", ln))
    assert "Traceback" not in own, own[-3000:]
    errors = [ln.strip() for ln in log.splitlines() if ln.strip().startswith("error: ")]
    assert len(errors) == 1, log[-3000:]
    assert errors[0] == f"error: {failure.value}"
    return str(failure.value)


def train_locally(steps: int, output_dir: Path) -> Path:
    result = subprocess.run([sys.executable, str(tp.TRAIN_SCRIPT), "--steps", str(steps), "--output-dir",
                             str(output_dir)], capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    return output_dir


def score(kubeconfig: Path, workdir: Path, *checkpoint_dirs: Path, claim: str = "local-claim") -> list[dict]:
    """make_dataset once, then evaluate on each checkpoint directory (as if the claim were mounted there)."""
    from typing import NamedTuple

    from kfp import dsl

    names = [f"m{i}" for i in range(len(checkpoint_dirs))]

    @dsl.pipeline(name="score-checkpoints")
    def scoring(claim: str) -> NamedTuple("Scores", [(n, dsl.Metrics) for n in names]):
        script = tp.TRAIN_SCRIPT.read_text()
        data = tp.make_dataset(script=script, seed=0, features=16, samples=256)
        scores = [tp.evaluate(script=script, namespace="team-a", trainjob="local", output_claim=claim,
                              output_mount_path=str(d), dataset=data.outputs["dataset"]).outputs["metrics"]
                  for d in checkpoint_dirs]
        return NamedTuple("Scores", [(n, dsl.Metrics) for n in names])(*scores)

    task, _root, _seconds = tp._run_with_kfp_local(kubeconfig, workdir, lambda: scoring(claim=claim))
    return [dict(task.outputs[n].metadata) for n in names]
