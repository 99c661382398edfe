"""`trainstack e2e --kube-upgrade-to RELEASE`: the platform through a Kubernetes upgrade of its cluster.

What a platform team lives through on upgrade day: the platform installed and TrainJobs done on the lock's
release, then the control plane replaced by a newer tested release in the order upstream prescribes
(kube-apiserver, then kube-controller-manager, then kube-scheduler), each process started again with the
same arguments and the new binary, on the same etcd. The feature gates and --runtime-config become the new
release's (the lock's kubernetes.matrix), since a gate or API version a release does not have stops its
API server. After it: the API server says the new release, the platform's CRDs, controllers, webhooks,
runtimes and policies are there, the TrainJobs from before are kept, a new TrainJob completes, the
policies still deny `:latest`, and helm uninstall keeps CRDs and TrainJobs. Local provider, KWOK nodes
(the real node's kubelet is not replaced); `make test-matrix` runs it from each release to the next.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import yaml

from .. import lock as lockmod
from .. import tools
from ..cluster.common import pid_alive, stop_pids
from ..cluster.controlplane import component_gates, switches
from ..errors import UsageError, UserError
from ..jsontypes import dig
from .base import Outcome, SuiteFailure, server_version
from .smokejobs import SMOKE_NS

# Upstream's order: the API server first (it serves older clients), then the controller manager and scheduler.
ORDER = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
SWITCHES = ("--feature-gates", "--runtime-config")


def target_lock(lock: lockmod.Lock, target: str) -> lockmod.Lock:
    """The lock for TARGET, a tested release newer than the lock's; one line otherwise."""
    found = lock.kubernetes_release(target)
    if found is None:
        raise UsageError(f"--kube-upgrade-to {target}: not a tested release "
                         f"(tested: {', '.join(lock.kubernetes_matrix())})")
    if lockmod.release_key(found) <= lockmod.release_key(lock.kubernetes_version):
        raise UsageError(f"--kube-upgrade-to {found}: not newer than the cluster's {lock.kubernetes_version}",
                         f"run with {lockmod.KUBERNETES_ENV} set to an older release to upgrade from it")
    return lock.for_kubernetes(found)


def upgraded_command(command: list[str], binary: str, component: str, lock: lockmod.Lock) -> list[str]:
    """COMMAND (a control-plane process's argv) with BINARY in place of its program and the feature gates and
    runtime config of LOCK's release instead of the old ones (none when that release sets none)."""
    out, skip = [binary], False
    for arg in command[1:]:
        if skip:
            skip = False
            continue
        if arg in SWITCHES:
            skip = True  # the value is the next argument
            continue
        if arg.split("=", 1)[0] in SWITCHES:
            continue
        out.append(arg)
    gates = component_gates(lock, component)
    if gates:
        out.append(f"--feature-gates={switches(gates)}")
    if component == "kube-apiserver" and lock.kubernetes_runtime_config:
        out.append(f"--runtime-config={switches(lock.kubernetes_runtime_config)}")
    return out


def plan(suite: Any, target: str) -> list[tuple[str, Any]]:
    new = target_lock(suite.lock, target)
    after = [(f"{name} (after the upgrade)", fn) for name, fn in suite.platform_checks()]
    return [
        *suite.cluster_steps(),
        ("helm install", suite.install),
        *suite.platform_checks(),
        ("smoke TrainJobs Complete", suite.smoke_jobs),
        (f"control plane upgraded to {new.kubernetes_version}", lambda: upgrade(suite, new)),
        *after,
        ("TrainJobs from before kept", lambda: kept(suite)),
        ("a new TrainJob Complete", lambda: new_job(suite)),
        ("image policy on ':latest'", suite.check_policy),
        ("helm uninstall keeps CRDs and TrainJobs", suite.uninstall),
    ]


def upgrade(suite: Any, new: lockmod.Lock) -> Outcome:
    cluster = suite.kube
    if not hasattr(cluster, "start_component"):
        raise UserError("--kube-upgrade-to needs the local provider (it replaces the control plane's processes)")
    before = server_version(cluster)
    # every command first: the controller manager and the scheduler exit when they lose their leases while
    # the API server is down (a kubelet or systemd would start them again, with the new binary)
    commands = {c: cluster.component_command(c) for c in ORDER}
    start = time.monotonic()
    for component in ORDER:
        command, env, cwd = commands[component]
        upgraded = upgraded_command(command, str(tools.require(component, new)), component, new)
        pid = cluster.pids().get(component)
        if pid and pid_alive(pid):
            stop_pids([pid], grace=10.0)
        cluster.start_component(component, (upgraded, env, cwd))
        if component == "kube-apiserver":
            cluster.wait_api(120)
    # the platform's controllers lost their leases too: started again as their Deployments' pods would be
    restarted = suite.provider.controllers.restart_dead() if getattr(suite.provider, "controllers", None) else []
    served = server_version(cluster)
    if served != new.kubernetes_version:
        raise SuiteFailure(f"after the upgrade the API server says {served}, not {new.kubernetes_version}")
    seconds = round(time.monotonic() - start, 1)
    again = f"; started again: {', '.join(restarted)}" if restarted else ""
    return Outcome(f"{before} -> {served} ({', '.join(ORDER)} in turn, same etcd) in {seconds:.1f}s{again}",
                   {"from": before, "to": served, "seconds": seconds, "restarted": restarted})


def kept(suite: Any) -> Outcome:
    found = {j["metadata"]["name"]: j for j in suite.read("trainjobs", SMOKE_NS)}
    missing = [j.name for j in suite.jobs if j.name not in found]
    if missing:
        raise SuiteFailure(f"TrainJobs lost in the upgrade: {', '.join(missing)}")
    done = [name for name, job in found.items()
            if any(c.get("type") == "Complete" and c.get("status") == "True"
                   for c in dig(job, "status", "conditions", default=[]))]
    lost = [j.name for j in suite.jobs if j.name not in done]
    if lost:
        raise SuiteFailure(f"TrainJobs no longer Complete after the upgrade: {', '.join(lost)}")
    return Outcome(f"{len(suite.jobs)} TrainJobs still there and Complete", {"kept": sorted(done)})


def new_job(suite: Any) -> Outcome:
    job = dataclasses.replace(suite.jobs[0], name=f"{suite.jobs[0].name[:50]}-upgraded")
    suite.kube.kubectl("create", "-f", "-", input_text=yaml.safe_dump(job.manifest(SMOKE_NS)))
    suite.wait_trainjobs({job.name: "Complete"}, timeout=suite.provider.job_timeout)
    return Outcome(f"TrainJob {job.name} on {job.runtime_name} Complete on the new release",
                   {"job": job.name, "runtime": job.runtime_name})
