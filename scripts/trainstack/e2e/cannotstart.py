"""A TrainJob whose pods cannot start, made visible: the e2e's end-to-end case.

`cannot_start` creates a TrainJob on a golden CPU runtime whose trainer image is not in the cluster's
registry, on the real nodes: the kubelet's pull fails (ErrImagePull, then ImagePullBackOff) and the
TrainJob neither runs nor fails. `trainstack status` (its `collect`, as the command runs it) must flag
it with the pod and the reason within the wait; the chart's TrainstackTrainJobPodsCannotStart alert
watches the same reasons (its promtool test: tests/testdata/monitoring/alerts_test.yaml).
"""

from __future__ import annotations

import time
from typing import Any

import yaml

from .. import status as statusmod
from ..cluster import node as nodemod
from ..errors import UserError
from .base import SMOKE_NS
from .smokejobs import SmokeJob

MISSING_IMAGE = f"{nodemod.MIRROR}/trainstack/not-built:0"


def cannot_start(kube: Any, kubeconfig: Any, runtime: dict[str, Any], placement: tuple[dict[str, str], list[Any]],
                 labels: dict[str, str], timeout: float = 90) -> dict[str, Any]:
    name = "cannot-start"
    job = SmokeJob(name, runtime, num_nodes=1, labels=dict(labels), image=MISSING_IMAGE,
                   command=["python", "-c", "print('never')"])
    job.node_selector, job.tolerations = placement
    kube.kubectl("create", "namespace", SMOKE_NS, check=False)
    kube.kubectl("create", "-f", "-", input_text=yaml.safe_dump(job.manifest(SMOKE_NS)))
    cluster = statusmod.Cluster(str(kubeconfig))
    start = time.monotonic()
    try:
        while True:
            found = statusmod.collect(cluster, SMOKE_NS)
            row = next((t for t in found.trainjobs if t.name == name), None)
            if row is not None and row.blocked:
                return {"trainjob": name, "state": row.state, "blocked": row.blocked,
                        "reason": row.blocked.split(": ")[1], "seconds": round(time.monotonic() - start, 1)}
            if time.monotonic() - start > timeout:
                raise UserError(f"trainstack status did not flag TrainJob {name} (image {MISSING_IMAGE}) within "
                                f"{timeout:.0f}s: state {row.state if row else 'absent'}")
            time.sleep(2)
    finally:
        kube.kubectl("delete", "trainjob", name, "-n", SMOKE_NS, "--wait=false", check=False)
