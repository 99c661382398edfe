"""Faults survived, on the local cluster: inject a fault while TrainJobs are in flight, then check
that every TrainJob reaches the state it should and nothing is lost.

Each fault starts TrainJobs first: some created and reconciled (their JobSets exist) but held
(`suspend: true`, resumed once the fault is over), some created just before the fault. On KWOK
nodes a pod completes as soon as it runs, so "running" here means not yet finished when the
fault hits (the held ones are the jobs certainly in flight). The row reports: jobs in flight at
injection, jobs lost (gone, or not ending Complete), seconds from injection until a TrainJob is
admitted again and every job of the row is Complete.

The local provider runs the chart's controllers as host processes (nothing restarts them, as a
Deployment's kubelet would): after a fault any controller that exited (killed, or lost its
leader lease while the API server was away) is started again, the way restartPolicy Always
does, and the row says so.

`real_node_fault` restarts kubelet or containerd on the local cluster's real node while a
TrainJob's pod really runs there, and checks that the same pod ends Complete, its container never
restarted.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any

import yaml

from .. import kubeapi, progress
from ..errors import UserError
from ..jsontypes import dig
from .base import NAMESPACE, SMOKE_NS
from .clusterstate import losses, rejection, snapshot, terminal
from .jobpods import ended_after
from .smokejobs import SmokeJob, golden_runtimes
from .upgrade import JOBS_NS, UpgradeTest

TRAINER = "trainer"
JOBSET = "jobset"


@dataclass
class FaultRow:
    fault: str
    running: int
    lost: int
    recover_seconds: float
    detail: str = ""
    data: dict[str, Any] = field(default_factory=dict)  # what the fault found, as fields (tests assert on these)


class Faults:
    """Faults on a local-provider cluster after `helm install` (host controllers, KWOK nodes)."""

    def __init__(self, test: UpgradeTest, provider: Any, jobs: int = 2) -> None:
        self.test, self.provider, self.jobs = test, provider, jobs
        self.rows: list[FaultRow] = []
        self.restarted: list[str] = []
        # how each control-plane process was started, to start one again that exits after a fault
        # (kube-controller-manager and kube-scheduler exit when they lose their leader lease)
        cluster = provider.cluster
        self.components = {c: cluster.component_command(c) for c in cluster.pids() if cluster.component_alive(c)}

    # -- the host controllers ----------------------------------------------------------------
    def controller(self, which: str) -> Any:
        ctls = self.provider.controllers
        if ctls is None:
            raise UserError("faults need the chart installed on the local provider (no host controllers)")
        for ctl in ctls.controllers:
            if which in ctl.binary_name:
                return ctl
        raise UserError(f"no {which} controller among {[c.binary_name for c in ctls.controllers]}")

    def kill_saying(self, said: str, *which: str) -> str:
        self.kill(*which)
        return said

    def kill(self, *which: str) -> None:
        for name in which:
            ctl = self.controller(name)
            os.kill(ctl.pid, signal.SIGKILL)
            ctl.process.wait(timeout=10)

    def start_dead(self) -> list[str]:
        """Start again each control-plane process and controller whose process is gone (what the kubelet does
        for static pods and Deployments: restartPolicy Always); wait until the controllers are ready."""
        cluster = self.provider.cluster
        again = [c for c in self.components if not cluster.component_alive(c)]
        for component in again:
            cluster.start_component(component, self.components[component])
        if again:
            cluster.wait_api(60)
        names = again + self.provider.controllers.restart_dead(timeout=120)
        self.restarted += names
        return names

    # -- one fault ---------------------------------------------------------------------------
    def admitted(self, job: dict[str, Any]) -> bool:
        return not rejection(self.test.kube, job)

    def run(self, name: str, inject: Callable[[], str], recover: Callable[[], str] | None = None,
            timeout: float = 300) -> FaultRow:
        test = self.test
        slug = "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")[:24].strip("-")
        held = test.start_jobs(f"f-{slug}-held", self.jobs, 30, suspend=True)
        test.wait_jobsets(held)
        fresh = test.start_jobs(f"f-{slug}-new", self.jobs, 1)
        names = held + fresh
        before = snapshot(test.kube)
        running = sum(1 for n in names if not before.trainjobs.get(f"{JOBS_NS}/{n}", ("", ""))[0])
        start = time.monotonic()
        notes = [inject() or ""]
        if recover is not None:
            notes.append(recover() or "")
        restarted: list[str] = []
        probe = test.trainjob(f"probe-{slug}", test.torch_runtime())
        while True:  # a controller may also exit a little later (its leader lease expires): restart it then
            restarted += self.start_dead()
            if self.admitted(probe):
                break
            if time.monotonic() - start > timeout:
                raise UserError(f"fault {name}: TrainJob creates still rejected after {timeout:.0f}s")
            time.sleep(0.3)
        admitted = time.monotonic() - start
        test.resume(held)
        api = test.api()
        items: dict[str, str] = {}
        states: dict[str, str] | None = None
        # watching the TrainJobs; at least every second (tick) a controller that exited is started again
        for objects in kubeapi.snapshots(api, kubeapi.resource(api, "trainjobs", JOBS_NS), tick=1.0,
                                         timeout=max(0.0, timeout - (time.monotonic() - start))):
            restarted += self.start_dead()
            items = {n: terminal(t)[0] for n, t in objects.items()}
            if all(items.get(n) for n in names):
                states = {n: items[n] for n in names}
                break
        if states is None:
            late = [n for n in names if not items.get(n)]
            raise UserError(f"fault {name}: TrainJobs not finished within {timeout:.0f}s: {', '.join(late)}")
        recovered = time.monotonic() - start
        if restarted:
            notes.append(f"started again after exiting: {', '.join(restarted)} (restartPolicy Always)")
        after = snapshot(test.kube)
        problems = losses(before, after)
        lost = sum(1 for n in names if f"{JOBS_NS}/{n}" not in after.trainjobs) + sum(
            1 for s in states.values() if s != "Complete")
        notes.append(f"creates admitted again after {admitted:.1f}s")
        row = FaultRow(name, running, lost, round(recovered, 1), "; ".join([n for n in notes if n] + problems))
        self.rows.append(row)
        return row

    # -- the faults ----------------------------------------------------------------------------
    def trainer_killed(self) -> FaultRow:
        return self.run("Trainer controller killed", partial(self.kill_saying, "SIGKILL the Trainer controller", TRAINER))

    def both_killed(self) -> FaultRow:
        return self.run("both controllers killed",
                        partial(self.kill_saying, "SIGKILL the Trainer and JobSet controllers", TRAINER, JOBSET))

    def api_server_restarted(self) -> FaultRow:
        cluster = self.provider.cluster
        return self.run("API server restarted",
                        lambda: f"kube-apiserver back in {cluster.restart_component('kube-apiserver'):.1f}s")

    def etcd_restarted(self) -> FaultRow:
        cluster = self.provider.cluster
        return self.run("etcd restarted",
                        lambda: f"etcd stopped and started, API ready again in {cluster.restart_component('etcd'):.1f}s")

    def webhooks_unavailable(self) -> FaultRow:
        """The Trainer webhook server gone: a TrainJob create is rejected with a message that names the
        webhook, nothing is stored; the server back, the same create succeeds."""
        test = self.test
        name = "webhook-down"
        job = test.trainjob(name, test.torch_runtime())
        result: dict[str, Any] = {}

        def inject() -> str:
            self.kill(TRAINER)
            created = test.kube.kubectl("create", "-f", "-", input_text=yaml.safe_dump(job), check=False)
            api = test.api()
            stored = kubeapi.named(api, kubeapi.resource(api, "trainjobs", JOBS_NS), name) is not None
            jobset = kubeapi.named(api, kubeapi.resource(api, "jobsets", JOBS_NS), name) is not None
            result.update(rc=created.returncode, message=(created.stderr.strip().splitlines() or [""])[-1],
                          stored=stored or jobset)
            return ""

        row = self.run("webhooks unavailable", inject)
        problems = []
        if result["rc"] == 0:
            problems.append("a TrainJob was admitted with the webhook server down")
        elif "webhook" not in result["message"]:
            problems.append(f"the rejection does not name the webhook: {result['message'][:200]}")
        if result["stored"]:
            problems.append("the rejected TrainJob (or a JobSet for it) was stored: half-created")
        created = test.kube.kubectl("create", "-f", "-", input_text=yaml.safe_dump(job), check=False)
        if created.returncode:
            problems.append(f"the same create after recovery failed: {created.stderr.strip()[-200:]}")
        else:
            states = test.wait_terminal([name], 120)
            if states[name] != "Complete":
                problems.append(f"the TrainJob created after recovery ended {states[name]}")
        row.detail = "; ".join(problems) if problems else (
            f"rejected: {result['message'][:150]}; nothing stored; after recovery the same create succeeded "
            f"and ended Complete; {row.detail}")
        row.lost += len(problems)
        return row

    def all_kwok(self) -> list[FaultRow]:
        for fn in (self.trainer_killed, self.both_killed, self.webhooks_unavailable, self.api_server_restarted,
                   self.etcd_restarted):
            fn()
        return self.rows

    def table(self) -> None:
        progress.table("faults survived", ["fault", "jobs running", "jobs lost", "seconds to recover", "detail"],
                       [(r.fault, r.running, r.lost, f"{r.recover_seconds:.1f}", r.detail[:160]) for r in self.rows])


__all__ = ["NAMESPACE", "FaultRow", "Faults"]


# -- the real node -------------------------------------------------------------------------------------


def real_node_fault(suite: Any, component: str, seconds: int = 20, jobs: int = 1) -> FaultRow:
    """On the local cluster's real node: start `jobs` TrainJobs whose pods really run for `seconds`, wait
    until they run, restart `component` (kubelet or containerd) the way systemd would, and check that
    every TrainJob ends Complete with its containers never restarted (kubelet re-adopts the running pods;
    containerd's shims keep the containers alive). `outlived` in the row's data: every container ended
    after the daemon was started again, so the fault hit containers that were running (a daemon away
    for longer than the containers' `seconds` would have proved nothing)."""
    kube = suite.kube
    real = {n.name: n for n in suite.provider.cluster.nodes}
    runtime = next(r for r in golden_runtimes(suite.rendered) if suite.provider.is_real(
        SmokeJob("x", r)) and "torch" in (dig(r, "spec", "mlPolicy") or {}))
    kube.kubectl("create", "namespace", SMOKE_NS, check=False)
    names = [f"{component}-restart-{i}" for i in range(jobs)]
    for name in names:
        job = SmokeJob(name, runtime, num_nodes=1, labels=dict(suite.job_labels),
                       command=["python", "-c", f"import time; time.sleep({seconds}); print('done')"])
        job.node_selector, job.tolerations = suite.provider.placement(job)
        kube.kubectl("create", "-f", "-", input_text=yaml.safe_dump(job.manifest(SMOKE_NS)))
    selector = "jobset.sigs.k8s.io/jobset-name in (" + ",".join(names) + ")"
    api = suite.api()

    def on_the_node(found: dict[str, dict[str, Any]]) -> list[dict[str, Any]] | None:
        running = [p for p in found.values() if dig(p, "status", "phase") == "Running"
                   and p["spec"].get("nodeName") in real]
        return running if len(running) >= jobs else None

    running = kubeapi.wait_for(api, kubeapi.pods(api), on_the_node, suite.provider.job_timeout,
                               namespace=SMOKE_NS, label_selector=selector)
    if running is None:
        raise UserError(f"{component} fault: the TrainJobs' pods did not run on the real node in time")
    uids = {p["metadata"]["uid"] for p in running}
    # the daemon restarts on the node that runs most of the pods (all of them with one job)
    hosts = [p["spec"]["nodeName"] for p in running]
    node = real[max(set(hosts), key=hosts.count)]
    start = time.monotonic()
    away = node.restart(component)
    back = datetime.now(UTC)
    states = suite.wait_trainjobs({n: "Complete" for n in names}, timeout=suite.provider.job_timeout)
    recovered = time.monotonic() - start
    pods = kubeapi.items(api, kubeapi.pods(api), namespace=SMOKE_NS, label_selector=selector)
    restarts = sum(c.get("restartCount", 0) for p in pods for c in dig(p, "status", "containerStatuses") or [])
    same = uids <= {p["metadata"]["uid"] for p in pods}
    outlived = ended_after(pods, back)
    lost = sum(1 for n in names if n not in states) + (0 if same else 1)
    detail = (f"{component} on {node.name} away {away:.1f}s; pods kept (same uids: {same}), container restarts {restarts}; "
              f"ended Complete")
    return FaultRow(f"{component} restarted (real node)", len(running), lost, round(recovered, 1), detail,
                    {"node": node.name, "away_s": round(away, 1), "same_pods": same, "container_restarts": restarts,
                     "outlived": outlived, "completed": sorted(states)})
