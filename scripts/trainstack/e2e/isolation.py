"""Team network isolation on the real nodes (docs/teams.md, "Network isolation"), enforced by kube-router.

The local provider's real-node suite installs two teams (TEAMS, `values`) and monitoring, so the chart renders
each team's `trainstack-team-isolation` NetworkPolicy. `run` then, in team TEAM:

1. waits for the team's MLflow account (the tracking server's accounts sidecar makes it), starts a listener pod
   on LISTEN_PORT (a port no framework uses) and submits a two-node torch TrainJob through the Kubeflow SDK;
2. once rank 0 has logged a step (its rendezvous store listens on 29500 for the whole run), starts probe pods
   that each try every target, rank 0's pod on 29500 and the listener on LISTEN_PORT: one in TEAM (expected
   to connect), one in OTHER_TEAM and one in a namespace that is no team's (expected refused for the whole
   window), and one in MONITORING_NS (admitted to the team's pods, and it scrapes the tracking server's
   metrics Service over the pod network, as Prometheus would);
3. checks that rank 0 was still running when the refused probes' windows ended (a refusal while nothing
   listened would prove nothing), waits for the TrainJob to complete on two real nodes, and reads its run back
   from MLflow as the team's account (and refused to OTHER_TEAM's).

Each probe prints one JSON line; the results are the step's data. The probes, the listener and the TrainJob are
deleted afterwards.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from .. import images, kubeapi
from .. import lock as lockmod
from ..errors import UserError
from . import netreach
from . import tracking as trackingmod
from .base import NAMESPACE, Outcome, StepFn
from .jobpods import pod_facts, pods_of
from .realnode import NODES, OUTPUT, RealNodeSteps, events, example_module, losses, pod_cpu

TEAM, OTHER_TEAM = "team-a", "team-b"
TEAMS = (TEAM, OTHER_TEAM)
MONITORING_NS = "monitoring"  # monitoring.namespace's default: admitted by the teams' policies
UNTEAMED_NS = netreach.UNTRACKED_NS  # a namespace that is no team's (and nobody tracks)
RENDEZVOUS_PORT = 29500  # torch's: rank 0's store, for the whole run
LISTEN_PORT = 8080
PROBE_LABEL = "trainstack.io/e2e-isolation"
STEPS = 5000  # at about 100 steps a second the run outlasts the probes (about 15 s) by tens of seconds
REFUSED_WINDOW = 5.0  # seconds a refused probe keeps trying each target
ADMITTED_WINDOW = 30.0  # seconds an admitted probe may take to get through (kube-router learns a new pod's IP)

PROBE = r"""
import json, socket, sys, time, urllib.request
targets, window, scrape = json.loads(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
out = {"window_start": time.time()}
for host, port in targets:
    start, errors, connected = time.monotonic(), [], None
    while time.monotonic() - start < window:
        try:
            socket.create_connection((host, port), timeout=2).close()
            connected = round(time.monotonic() - start, 2)
            break
        except OSError as err:
            errors.append(type(err).__name__)
            time.sleep(0.2)
    out[f"{host}:{port}"] = {"connected_after_s": connected, "failed_attempts": len(errors), "errors": sorted(set(errors))}
out["window_end"] = time.time()
if scrape:
    try:
        with urllib.request.urlopen(scrape, timeout=10) as r:
            text = r.read().decode()
        out["scrape"] = {"status": r.status, "mlflow_series": sum(1 for ln in text.splitlines() if ln.startswith("mlflow_"))}
    except OSError as err:
        out["scrape"] = {"status": None, "error": type(err).__name__}
print(json.dumps(out))
"""

LISTENER = r"""
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("", int(__import__("sys").argv[1])))
s.listen(64)
while True:
    c, _ = s.accept()
    c.close()
"""


class IsolationFailure(UserError):
    pass


def values() -> dict[str, Any]:
    """The values the real-node suite adds: the two teams (each with its isolation policy) and monitoring (its
    namespace admitted to the teams' pods and to the tracking server's metrics port)."""
    return {"teams": {t: {} for t in TEAMS}, "monitoring": {"enabled": True}}


def _pod(name: str, namespace: str, node: str, image: str, args: list[str], script: str,
         role: str) -> dict[str, Any]:
    """A pod of the restricted Pod Security level (team namespaces enforce it) running SCRIPT with ARGS."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {PROBE_LABEL: role}},
            "spec": {"nodeName": node, "restartPolicy": "Never", "automountServiceAccountToken": False,
                     "securityContext": {"runAsNonRoot": True, "runAsUser": 1000,
                                         "seccompProfile": {"type": "RuntimeDefault"}},
                     "containers": [{
                         "name": role, "image": image, "imagePullPolicy": "IfNotPresent",
                         "command": ["python3", "-c", script, *args],
                         "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
                         "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                             "readOnlyRootFilesystem": True}}]}}


def _phase(kube: Any, namespace: str, name: str, want: tuple[str, ...], timeout: float) -> dict[str, Any]:
    api = kubeapi.for_kube(kube)

    def reached(objects: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
        pod = objects.get(name) or {}
        return pod if (pod.get("status") or {}).get("phase") in want else None

    pod = kubeapi.wait_for(api, kubeapi.resource(api, "pods", namespace), reached, timeout,
                           field_selector=f"metadata.name={name}")
    if not pod:
        raise IsolationFailure(f"pod {namespace}/{name} not {' or '.join(want)} within {timeout:.0f}s")
    return dict(pod)


def _rank0(kube: Any, name: str, timeout: float) -> dict[str, Any]:
    """Rank 0's pod of TrainJob NAME once it has logged a training step (its store listens from before)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pod in pods_of(kube, name, TEAM):
            if "-node-0-0" in pod["metadata"]["name"] and (pod.get("status") or {}).get("phase") == "Running":
                out = kube.kubectl("logs", pod["metadata"]["name"], "-n", TEAM, "--tail=20", check=False).stdout
                if events(out.splitlines(), "step"):
                    return dict(pod)
        time.sleep(0.5)
    raise IsolationFailure(f"TrainJob {TEAM}/{name}: rank 0 logged no step within {timeout:.0f}s")


def _finished_at(kube: Any, namespace: str, pod: str) -> float | None:
    """When POD's first container ended (epoch seconds), or None while it runs."""
    found = kube.kubectl_json("get", "pod", pod, "-n", namespace)
    for status in (found.get("status") or {}).get("containerStatuses") or []:
        ended = (status.get("state") or {}).get("terminated")
        if ended:
            return datetime.fromisoformat(ended["finishedAt"]).timestamp()
    return None


def run(kube: Any, lock: lockmod.Lock, kubeconfig: Path, real_nodes: list[str], timeout: float) -> dict[str, Any]:
    """The isolation check (the module's docstring); returns what it found, an IsolationFailure where a probe
    got the wrong answer, the run is missing from MLflow or the TrainJob did not train across the real nodes."""
    own = trackingmod.credential(kube, TEAM)  # before the TrainJob: its pods read the Secret when they start
    other = trackingmod.credential(kube, OTHER_TEAM)
    image = images.reference("python", lock)
    stamp = f"{int(time.time()) % 100000}"
    for ns in (MONITORING_NS, UNTEAMED_NS):
        kube.kubectl("create", "namespace", ns, check=False)
    listener = f"listener-{stamp}"
    kube.kubectl("apply", "-f", "-", input_text=yaml.safe_dump(
        _pod(listener, TEAM, real_nodes[-1], image, [str(LISTEN_PORT)], LISTENER, "listener")))
    from kubeflow.common.types import KubernetesBackendConfig
    from kubeflow.trainer import TrainerClient

    sdk = example_module("sdk_submit")
    args = sdk.parse_args(["--runtime", "torch-distributed", "--num-nodes", str(NODES), "--cpu", pod_cpu(len(real_nodes)),
                           "--memory", "1536Mi", "--namespace", TEAM, "--",
                           "--steps", str(STEPS), "--seed", "0", "--output-dir", OUTPUT])
    tc = TrainerClient(backend_config=KubernetesBackendConfig(namespace=TEAM, config_file=str(kubeconfig)))
    name = tc.train(runtime="torch-distributed", trainer=sdk.build_trainer(args))
    try:
        return _probe_and_read(kube, lock, tc, name, listener, image, real_nodes, own, other, timeout)
    finally:
        for ns in (TEAM, OTHER_TEAM, MONITORING_NS, UNTEAMED_NS):
            kube.kubectl("delete", "pods", "-n", ns, "-l", PROBE_LABEL, "--wait=false", check=False)
        kube.kubectl("delete", "trainjob", name, "-n", TEAM, "--wait=false", check=False)


def _probe_and_read(kube: Any, lock: lockmod.Lock, tc: Any, name: str, listener: str, image: str,
                    real_nodes: list[str], own: tuple[str, str], other: tuple[str, str],
                    timeout: float) -> dict[str, Any]:
    started = time.monotonic()
    rank0 = _rank0(kube, name, timeout)
    listening = _phase(kube, TEAM, listener, ("Running",), 60)
    rank0_node = rank0["spec"]["nodeName"]
    other_node = next((n for n in real_nodes if n != rank0_node), rank0_node)
    targets = [[rank0["status"]["podIP"], RENDEZVOUS_PORT], [listening["status"]["podIP"], LISTEN_PORT]]
    scrape = (f"http://{trackingmod.METRICS_SERVICE}.{NAMESPACE}.svc:{trackingmod.METRICS_PORT}/metrics")
    probes = [{"namespace": TEAM, "node": other_node, "expect": "admitted"},
              {"namespace": OTHER_TEAM, "node": rank0_node, "expect": "refused"},
              {"namespace": UNTEAMED_NS, "node": other_node, "expect": "refused"},
              {"namespace": MONITORING_NS, "node": other_node, "expect": "admitted", "scrape": scrape}]
    for i, p in enumerate(probes):
        p["pod"] = f"isolation-probe-{listener.split('-')[-1]}-{i}"
        p["window_s"] = ADMITTED_WINDOW if p["expect"] == "admitted" else REFUSED_WINDOW
        p["targets"] = [f"{h}:{port}" for h, port in targets]
    kube.kubectl("apply", "-f", "-", input_text=yaml.safe_dump_all([
        _pod(p["pod"], p["namespace"], p["node"], image,
             [json.dumps(targets), str(p["window_s"]), p.get("scrape", "")], PROBE, "probe") for p in probes]))
    for p in probes:
        _phase(kube, p["namespace"], p["pod"], ("Succeeded", "Failed"), 120)
        out = kube.kubectl("logs", p["pod"], "-n", p["namespace"], check=False).stdout.strip()
        try:
            p["result"] = json.loads(out.splitlines()[-1])
        except (ValueError, IndexError):
            raise IsolationFailure(f"probe {p['namespace']}/{p['pod']} printed no result: {out[-200:]!r}") from None
        p["connected"] = {t: p["result"][t]["connected_after_s"] is not None for t in p["targets"]}
    ended = _finished_at(kube, TEAM, rank0["metadata"]["name"])
    refused_end = max(p["result"]["window_end"] for p in probes if p["expect"] == "refused")
    result: dict[str, Any] = {"trainjob": name, "rank0": {"pod": rank0["metadata"]["name"], "node": rank0_node,
                                                          "ip": rank0["status"]["podIP"]},
                              "listener": {"pod": listener, "node": listening["spec"]["nodeName"],
                                           "ip": listening["status"]["podIP"]},
                              "probes": probes, "rank0_ended": ended, "refused_windows_end": refused_end,
                              "probes_s": round(time.monotonic() - started, 1)}
    wrong = [f"{p['namespace']} on {p['node']} {'reached' if ok else 'could not reach'} {t}"
             f" ({p['result'][t]['failed_attempts']} failed attempts: {', '.join(p['result'][t]['errors'])})"
             for p in probes for t, ok in p["connected"].items() if ok != (p["expect"] == "admitted")]
    if wrong:
        raise IsolationFailure(f"TrainJob {TEAM}/{name}: {'; '.join(wrong)}")
    if ended is not None and ended < refused_end:
        raise IsolationFailure(f"TrainJob {TEAM}/{name}: rank 0 ended before the refused probes' windows did: "
                               f"their refusals do not show the policy (raise STEPS)")
    monitor = next(p for p in probes if p["namespace"] == MONITORING_NS)
    if (monitor["result"].get("scrape") or {}).get("status") != 200 or not monitor["result"]["scrape"].get("mlflow_series"):
        raise IsolationFailure(f"a pod in {MONITORING_NS} could not scrape {scrape}: {monitor['result'].get('scrape')}")
    try:
        tc.wait_for_job_status(name, status={"Complete"}, timeout=int(timeout), polling_interval=1)
    except (RuntimeError, TimeoutError, ValueError) as err:
        raise IsolationFailure(f"TrainJob {TEAM}/{name} did not reach Complete: {err}") from None
    pods = [pod_facts(p) for p in pods_of(kube, name, TEAM)]
    result["pods"] = pods
    nodes = sorted({f["node"] for f in pods})
    if len(pods) != NODES or any(f["phase"] != "Succeeded" for f in pods) or (
            len(real_nodes) >= NODES and len(nodes) != NODES):
        raise IsolationFailure(f"TrainJob {TEAM}/{name}: expected {NODES} pods Succeeded on {NODES} real nodes, got "
                               f"{[(f['pod'], f['node'], f['phase']) for f in pods]}")
    loss = losses(list(tc.get_job_logs(name)))
    result["loss_first"], result["loss_last"] = (loss[0], loss[-1]) if loss else (None, None)
    if len(loss) != STEPS or not loss[-1] < loss[0] * 0.5:
        raise IsolationFailure(f"TrainJob {TEAM}/{name}: rank 0 logged {len(loss)} of {STEPS} steps, loss "
                               f"{result['loss_first']} -> {result['loss_last']}")
    with trackingmod.forwarded(kube, lock) as uri:
        read = trackingmod.read_runs(uri, TEAM, [name], own, other, lock)
    problems = trackingmod.run_problems(read["runs"][name], name, "torch", STEPS)
    if read.get("other_reads_run") or TEAM in read.get("other_sees", []):
        problems.append(f"{OTHER_TEAM}'s account reads the run or lists experiment {TEAM}")
    if problems:
        raise IsolationFailure(f"TrainJob {TEAM}/{name}'s run in MLflow (experiment {TEAM}): {'; '.join(problems)}")
    run = read["runs"][name][0]
    result["mlflow"] = {"run_id": run["run_id"], "status": run["status"],
                        "loss_steps": len(run["histories"]["loss"]), "artifacts": run["artifacts"],
                        "other_reads_run": read.get("other_reads_run"), "other_sees": read.get("other_sees")}
    return result


class IsolationSteps(RealNodeSteps):
    """The real nodes' steps plus the isolation step, right after the SDK TrainJob's (and its MLflow run's)."""

    def real_node_steps(self) -> list[tuple[str, StepFn]]:
        steps = super().real_node_steps()
        at = next((i for i, (step, _) in enumerate(steps) if step == "checkpoint outlives the pods"), len(steps))
        steps.insert(at, ("a team's pods refuse other namespaces", self.team_isolation))
        return steps

    def team_isolation(self) -> Outcome | str:
        """docs/teams.md, "Network isolation", on the real nodes (e2e/isolation.py)."""
        if not getattr(self.provider, "isolation", False):
            if self.provider.name == "kind":
                return ("skipped: the kind provider's bridge CNI enforces no NetworkPolicy (docs/kind.md), so a "
                        "refusal could not be seen")
            return "skipped: this run installs no teams (the suite's tracking is off)"
        nodes = [n.name for n in self.provider.cluster.nodes]
        r = run(self.kube, self.lock, self.provider.kubeconfig, nodes, timeout=self.provider.job_timeout)
        said = "; ".join(f"{p['namespace']} on {p['node']}: " + ", ".join(
            f"{t} {'connected' if ok else 'refused'}" for t, ok in p["connected"].items()) for p in r["probes"])
        monitor = next(p for p in r["probes"] if p["namespace"] == MONITORING_NS)
        return Outcome(f"{TEAM}'s TrainJob {r['trainjob']} on {', '.join(sorted({f['node'] for f in r['pods']}))}"
                       f" (loss {r['loss_first']:.4f} -> {r['loss_last']:.4f}); probes: {said}; the monitoring pod "
                       f"scraped {monitor['result']['scrape']['mlflow_series']} MLflow series; run "
                       f"{r['mlflow']['run_id'][:12]} {r['mlflow']['status']} in MLflow", r)
