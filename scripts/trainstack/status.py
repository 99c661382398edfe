"""`trainstack status`: the platform at a glance, from the current kube context.

The controllers (deployed version against the lock, ready replicas, the pod holding the leader
Lease), the ClusterTrainingRuntimes present (trainstack's golden ones marked), and TrainJobs per
namespace and state with age and progress (`status.trainerStatus`, filled only where the
TrainJobStatus feature gate is on), flagging active TrainJobs whose pods cannot start (a container
waiting with a reason that never clears by itself, or a pod unschedulable too long). Read-only: list calls only, paged, raw JSON (no model
objects), so 1,000 TrainJobs take about as long as their bytes take to arrive. With --runs, also each
TrainJob's MLflow run (the chart's tracking): the head of its rank-0 pod's log, where the example
scripts print the run they started, linked into MLflow's UI under --tracking-url.
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from . import api, kubeapi, progress
from . import lock as lockmod
from .errors import UserError
from .jsontypes import dig

# Deployment name -> (component, lock image). The chart's stable names (fullnameOverride).
COMPONENTS = {
    "kubeflow-trainer-controller-manager": ("trainer", "trainer-controller-manager"),
    "jobset-controller": ("jobset", "jobset-controller"),
    "lws-controller-manager": ("lws", "lws-controller"),
    "kueue-controller-manager": ("kueue", "kueue-controller"),
}
STATES = ("Pending", "Running", "Suspended", "Complete", "Failed")
# Container waiting reasons that never clear by themselves: the pod cannot start until someone acts
# (the chart's TrainstackTrainJobPodsCannotStart alert watches the same ones).
CANNOT_START = ("CreateContainerError", "CreateContainerConfigError", "ErrImagePull", "ImagePullBackOff",
                "InvalidImageName")
UNSCHEDULABLE_AFTER_S = 300  # an unschedulable pod this old is flagged (default of --stuck-after)
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
# rank 0's pod: the `node` step's first pod (completion index 0), whose log holds the "tracking" line
RANK0_SELECTOR = f"{JOBSET_NAME},jobset.sigs.k8s.io/replicatedjob-name=node,batch.kubernetes.io/job-completion-index=0"
RUN_LOG_BYTES = 256 * 1024  # the head of rank 0's log: the run is started before training
RUNS_LIMIT = 100  # TrainJobs whose run --runs looks up (the newest first)
LOG_READERS = 8  # rank-0 logs read at once
KUBELET_RETRY_STATUSES = (429, 503)  # the answers a log read (the kubelet's, through the API server) retries
PAGE = 500
DETAIL_LIMIT = 50  # TrainJobs listed one by one in text output with --all-namespaces


@dataclass
class Component:
    name: str
    deployment: str
    version: str
    pinned: str
    ready: str
    leader: str


@dataclass
class TrainJobRow:
    namespace: str
    name: str
    state: str
    runtime: str
    age_s: int
    progress: int | None = None
    remaining_s: int | None = None
    # why its pods cannot start: "<pod>: <reason>: <message>" ("" = nothing found)
    blocked: str = ""
    # its MLflow run (--runs): what rank 0 logged when it started the run ("" = none found)
    run_id: str = ""
    experiment_id: str = ""
    run_link: str = ""


@dataclass
class Status:
    context: str
    platform_namespace: str
    components: list[Component] = field(default_factory=list)
    runtimes: list[dict[str, Any]] = field(default_factory=list)
    trainjobs: list[TrainJobRow] = field(default_factory=list)
    seconds: float = 0.0
    unreadable_logs: int = 0  # --runs: rank-0 logs that could not be read

    def summary(self) -> list[dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for tj in self.trainjobs:
            empty = {"namespace": tj.namespace, **dict.fromkeys(STATES, 0), "oldest_active_s": 0}
            row = out.setdefault(tj.namespace, empty)
            row[tj.state] += 1
            if tj.state not in ("Complete", "Failed"):
                row["oldest_active_s"] = max(row["oldest_active_s"], tj.age_s)
        return [out[k] for k in sorted(out)]

    def as_json(self) -> dict[str, Any]:
        return {"context": self.context, "platformNamespace": self.platform_namespace,
                "components": [asdict(c) for c in self.components], "runtimes": self.runtimes,
                "trainjobs": {"summary": self.summary(), "items": [asdict(t) for t in self.trainjobs]},
                "unreadableLogs": self.unreadable_logs, "seconds": round(self.seconds, 3)}


# ----------------------------------------------------------------------------- reading the cluster
class Cluster:
    """List calls against the API server of a kubeconfig context (the kubernetes client)."""

    def __init__(self, kubeconfig: str | None = None, context: str | None = None) -> None:
        contexts, active = kubeapi.contexts(kubeconfig)
        chosen = context or (active or {}).get("name", "")
        if context and context not in {c["name"] for c in contexts}:
            raise UserError(f"kube context '{context}' is not in the kubeconfig",
                            f"known: {', '.join(c['name'] for c in contexts) or 'none'}")
        self.api = kubeapi.client(kubeconfig, context)
        # a pod's log comes from its node's kubelet: a 500 there (the kubelet cannot be reached) is no overloaded
        # API server, and five retries of it cost 6 s per pod
        self.kubelet_api = kubeapi.client(kubeconfig, context, retry_statuses=KUBELET_RETRY_STATUSES)
        self.context = chosen

    def get(self, path: str, params: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """GET path (JSON), None when the resource does not exist (404: CRD not installed)."""
        data = self.read(path, params)
        return None if data is None else dict(json.loads(data))

    def read(self, path: str, params: dict[str, Any] | None = None, accept: str = "application/json",
             from_kubelet: bool = False) -> bytes | None:
        """GET path: the body, None when the resource does not exist (404). FROM_KUBELET: the API server asks a
        node's kubelet (a pod's log), and a server error is not retried."""
        from urllib3.exceptions import HTTPError  # slow to import: only when a command talks to a cluster

        api = self.kubelet_api if from_kubelet else self.api
        try:
            response = api.call_api(path, "GET", query_params=list((params or {}).items()),
                                    header_params={"Accept": accept},
                                    auth_settings=["BearerToken"], _preload_content=False,
                                    _request_timeout=30)
        except kubeapi.ApiException as err:
            if err.status == 404:
                return None
            reason = (err.reason or "").strip()
            raise UserError(f"the API server refused GET {path}: {err.status} {reason}",
                            "check the kube context's permissions (trainstack status only lists)") from None
        except (HTTPError, OSError) as err:
            host = self.api.configuration.host
            raise UserError(f"cannot reach the API server {host} of context '{self.context}': {err}".splitlines()[0],
                            "is the cluster running and the kube context right?") from None
        return bytes(response[0].data)

    def list(self, path: str, selector: str = "") -> list[dict[str, Any]] | None:
        """Every item of a list endpoint (with a label selector), paged; None when the endpoint does not exist."""
        items: list[dict[str, Any]] = []
        base: dict[str, Any] = {"limit": PAGE, **({"labelSelector": selector} if selector else {})}
        params = dict(base)
        while True:
            page = self.get(path, params)
            if page is None:
                return None
            items.extend(page.get("items") or [])
            token = dig(page, "metadata", "continue")
            if not token:
                return items
            params = {**base, "continue": token}


def _age(timestamp: str | None, now: datetime) -> int:
    if not timestamp:
        return 0
    created = datetime.fromisoformat(timestamp)
    return max(0, int((now - created).total_seconds()))


def trainjob_state(tj: dict[str, Any]) -> str:
    """Failed, Complete, Suspended (Kueue or spec.suspend), Running (a Job has active or ready
    pods) or Pending (created, nothing running yet)."""
    status = tj.get("status") or {}
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    if conditions.get("Failed") == "True":
        return "Failed"
    if conditions.get("Complete") == "True":
        return "Complete"
    if conditions.get("Suspended") == "True" or dig(tj, "spec", "suspend"):
        return "Suspended"
    if any((j.get("active") or 0) > 0 or (j.get("ready") or 0) > 0 for j in status.get("jobsStatus") or []):
        return "Running"
    return "Pending"


def _image_tag(deployment: dict[str, Any]) -> str:
    containers = deployment["spec"]["template"]["spec"].get("containers") or []
    image = containers[0].get("image", "") if containers else ""
    ref = image.split("@", 1)[0]
    return ref.rsplit(":", 1)[1] if ":" in ref.rsplit("/", 1)[-1] else image


def _pinned_tag(lock: lockmod.Lock, image: str) -> str:
    try:
        return lock.image(image).tag
    except UserError:  # a component this lock does not pin (e.g. Kueue installed by someone else)
        return "-"


def why_blocked(pods: list[dict[str, Any]], now: datetime, unschedulable_after: int = UNSCHEDULABLE_AFTER_S) -> str:
    """Why a TrainJob's pods cannot start: a container waiting with a reason that never clears by itself
    (CANNOT_START), or a pod unschedulable for UNSCHEDULABLE_AFTER seconds; "" when neither."""
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        st = pod.get("status") or {}
        for container in (st.get("initContainerStatuses") or []) + (st.get("containerStatuses") or []):
            waiting = dig(container, "state", "waiting") or {}
            if waiting.get("reason") in CANNOT_START:
                message = " ".join(str(waiting.get("message") or "").split())[:200]
                return f"{pod['metadata']['name']}: {waiting['reason']}" + (f": {message}" if message else "")
        if st.get("phase") == "Pending":
            for cond in st.get("conditions") or []:
                since = _age(cond.get("lastTransitionTime"), now)
                if (cond.get("type") == "PodScheduled" and cond.get("status") == "False"
                        and cond.get("reason") == "Unschedulable" and since >= unschedulable_after):
                    message = " ".join(str(cond.get("message") or "").split())[:200]
                    return f"{pod['metadata']['name']}: Unschedulable for {human_age(since)}: {message}"
    return ""


def collect(cluster: Cluster, namespace: str | None, platform_namespace: str = api.NAMESPACE,
            lock: lockmod.Lock | None = None, now: datetime | None = None,
            unschedulable_after: int = UNSCHEDULABLE_AFTER_S, runs: bool = False, tracking_url: str = "") -> Status:
    """Everything `trainstack status` shows. namespace None: TrainJobs of all namespaces. RUNS: each TrainJob's
    MLflow run too (find_runs), linked under TRACKING_URL."""
    start = time.monotonic()
    lock = lock or lockmod.load()
    now = now or datetime.now(UTC)
    result = Status(context=cluster.context, platform_namespace=platform_namespace)

    deployments = cluster.list(f"/apis/apps/v1/namespaces/{platform_namespace}/deployments") or []
    leases = cluster.list(f"/apis/coordination.k8s.io/v1/namespaces/{platform_namespace}/leases") or []
    holders = [dig(lease, "spec", "holderIdentity") or "" for lease in leases]
    for deployment in deployments:
        name = deployment["metadata"]["name"]
        if name not in COMPONENTS:
            continue
        component, image = COMPONENTS[name]
        spec, st = deployment.get("spec") or {}, deployment.get("status") or {}
        leader = next((h.split("_", 1)[0] for h in holders if h.startswith(f"{name}-")), "-")
        result.components.append(Component(
            name=component, deployment=name, version=_image_tag(deployment), pinned=_pinned_tag(lock, image),
            ready=f"{st.get('readyReplicas', 0)}/{spec.get('replicas', 1)}", leader=leader))

    runtimes = cluster.list(f"/apis/{api.TRAINER_API}/clustertrainingruntimes")
    for rt in runtimes or []:
        labels = rt["metadata"].get("labels") or {}
        result.runtimes.append({"name": rt["metadata"]["name"],
                                "golden": labels.get(api.PART_OF[0]) == api.PART_OF[1],
                                "framework": labels.get(api.FRAMEWORK_LABEL, "")})
    result.runtimes.sort(key=lambda r: (not r["golden"], r["name"]))

    path = (f"/apis/{api.TRAINER_API}/namespaces/{namespace}/trainjobs" if namespace
            else f"/apis/{api.TRAINER_API}/trainjobs")
    trainjobs = cluster.list(path)
    if trainjobs is None:
        raise UserError(f"context '{cluster.context}' has no TrainJob API ({api.TRAINER_API})",
                        "install trainstack there first (README: Using it)")
    for tj in trainjobs:
        meta, spec, st = tj["metadata"], tj.get("spec") or {}, tj.get("status") or {}
        trainer = st.get("trainerStatus") or {}
        result.trainjobs.append(TrainJobRow(
            namespace=meta.get("namespace", ""), name=meta["name"], state=trainjob_state(tj),
            runtime=dig(spec, "runtimeRef", "name", default=""), age_s=_age(meta.get("creationTimestamp"), now),
            progress=trainer.get("progressPercentage"), remaining_s=trainer.get("estimatedRemainingSeconds")))
    active = [t for t in result.trainjobs if t.state in ("Pending", "Running")]
    if active:  # pods of the JobSets (one per TrainJob, the same name): why an active one cannot start
        pods_path = f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"
        by_job: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for pod in cluster.list(pods_path, selector=JOBSET_NAME) or []:
            meta = pod["metadata"]
            by_job.setdefault((meta.get("namespace", ""), (meta.get("labels") or {})[JOBSET_NAME]), []).append(pod)
        for row in active:
            row.blocked = why_blocked(by_job.get((row.namespace, row.name), []), now, unschedulable_after)
    result.trainjobs.sort(key=lambda t: (t.namespace, STATES.index(t.state), -t.age_s, t.name))
    if runs:
        result.unreadable_logs = find_runs(cluster, namespace, result.trainjobs, tracking_url)
    result.seconds = time.monotonic() - start
    return result


def run_of(log: str) -> dict[str, str]:
    """The MLflow run a training script started, from its log: the last `{"event": "tracking", "ok": true,
    "run_id": ..., "experiment_id": ...}` line (examples/trainstack_tracking.py prints it); {} when none."""
    found: dict[str, str] = {}
    for line in log.splitlines():
        line = line.strip()
        if not (line.startswith("{") and '"tracking"' in line):
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("event") == "tracking" and event.get("ok") and event.get("run_id"):
            found = {"run_id": str(event["run_id"]), "experiment_id": str(event.get("experiment_id", ""))}
    return found


def run_link(tracking_url: str, run: dict[str, str]) -> str:
    """The MLflow UI's page of RUN under TRACKING_URL ("" without a URL or a run)."""
    if not tracking_url or not run.get("run_id") or not run.get("experiment_id"):
        return ""
    return f"{tracking_url.rstrip('/')}/#/experiments/{run['experiment_id']}/runs/{run['run_id']}"


def find_runs(cluster: Cluster, namespace: str | None, rows: list[TrainJobRow], tracking_url: str = "") -> int:
    """Fill in the MLflow run of ROWS (the RUNS_LIMIT newest) from the head of each one's rank-0 log, while its
    pods exist; the number of logs that could not be read (no right to pods/log, or the pod went away)."""
    wanted = {(t.namespace, t.name): t for t in sorted(rows, key=lambda t: t.age_s)[:RUNS_LIMIT]}
    pods_path = f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"
    newest: dict[tuple[str, str], dict[str, Any]] = {}
    for pod in cluster.list(pods_path, selector=RANK0_SELECTOR) or []:
        meta = pod["metadata"]
        key = (meta.get("namespace", ""), dig(meta, "labels", JOBSET_NAME, default=""))
        if key in wanted and meta.get("creationTimestamp", "") >= newest.get(key, {}).get(
                "metadata", {}).get("creationTimestamp", ""):
            newest[key] = pod
    def head(key: tuple[str, str]) -> bytes | None:
        try:
            return cluster.read(f"/api/v1/namespaces/{key[0]}/pods/{newest[key]['metadata']['name']}/log",
                                {"container": "node", "limitBytes": RUN_LOG_BYTES}, accept="*/*",  # text/plain: 406
                                from_kubelet=True)
        except UserError:
            return None

    # side by side: each read goes through the API server to the pod's kubelet
    with ThreadPoolExecutor(max_workers=LOG_READERS) as pool:
        logs = dict(zip(newest, pool.map(head, newest), strict=True))
    unreadable = 0
    for key, log in logs.items():
        if log is None:
            unreadable += 1
            continue
        run = run_of(log.decode(errors="replace"))
        row = wanted[key]
        row.run_id, row.experiment_id = run.get("run_id", ""), run.get("experiment_id", "")
        row.run_link = run_link(tracking_url, run)
    return unreadable


# ----------------------------------------------------------------------------- output
def human_age(seconds: int) -> str:
    """kubectl-style: 42s, 7m, 5h12m, 3d4h."""
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m"
    if seconds < 86400:
        return f"{seconds // 3600}h{(seconds % 3600) // 60}m"
    return f"{seconds // 86400}d{(seconds % 86400) // 3600}h"


def print_text(status: Status, all_namespaces: bool) -> None:
    progress.stdout.print(f"context: {status.context}   platform namespace: {status.platform_namespace}",
                          markup=False)
    if status.components:
        progress.table("platform components", ["component", "deployment", "version", "pinned", "ready", "leader"],
                       [(c.name, c.deployment, c.version if c.version == c.pinned else f"{c.version} (!)",
                         c.pinned, c.ready, c.leader) for c in status.components])
    else:
        progress.stdout.print(f"no trainstack controllers in namespace {status.platform_namespace}", markup=False)
    golden = [r for r in status.runtimes if r["golden"]]
    others = [r for r in status.runtimes if not r["golden"]]
    progress.table(f"ClusterTrainingRuntimes ({len(golden)} golden, {len(others)} other)",
                   ["runtime", "framework", "golden"],
                   [(r["name"], r["framework"], "yes" if r["golden"] else "") for r in status.runtimes])
    progress.table(f"TrainJobs ({len(status.trainjobs)})", ["namespace", *STATES, "oldest active"],
                   [(s["namespace"], *(s[state] or "" for state in STATES),
                     human_age(s["oldest_active_s"]) if s["oldest_active_s"] else "") for s in status.summary()])
    blocked = [t for t in status.trainjobs if t.blocked]
    if blocked:
        progress.table(f"TrainJobs whose pods cannot start ({len(blocked)})", ["namespace", "trainjob", "why"],
                       [(t.namespace, t.name, t.blocked) for t in blocked])
    rows = status.trainjobs
    title = "TrainJobs"
    if all_namespaces:
        rows = [t for t in rows if t.state not in ("Complete", "Failed")][:DETAIL_LIMIT]
        title = f"active TrainJobs (first {DETAIL_LIMIT}; -n NAMESPACE lists all of one namespace)"
    if rows:
        with_runs = any(t.run_id for t in rows)
        progress.table(title, ["namespace", "trainjob", "state", "runtime", "age", "progress",
                               *(["MLflow run"] if with_runs else [])],
                       [(t.namespace, t.name, t.state, t.runtime, human_age(t.age_s),
                         "" if t.progress is None else f"{t.progress}%"
                         + ("" if t.remaining_s is None else f" ({human_age(t.remaining_s)} left)"),
                         *([t.run_link or (f"experiment {t.experiment_id}, run {t.run_id}" if t.run_id else "")]
                           if with_runs else []))
                        for t in rows])
    if status.unreadable_logs:
        progress.stdout.print(f"{status.unreadable_logs} rank-0 logs could not be read for their MLflow run "
                              "(no right to get pods/log, the pod is gone, or its node serves no logs: KWOK)", markup=False)


def _cmd_status(args: argparse.Namespace) -> int:
    if args.namespace and args.all_namespaces:
        raise UserError("--namespace and --all-namespaces exclude each other", exit_code=2)
    cluster = Cluster(args.kubeconfig, args.context)
    namespace = None if args.all_namespaces else args.namespace
    if namespace is None and not args.all_namespaces:
        namespace = _current_namespace(args.kubeconfig, cluster.context)
    status = collect(cluster, namespace, args.platform_namespace, unschedulable_after=args.stuck_after,
                     runs=args.runs, tracking_url=args.tracking_url)
    if args.output == "json":
        print(json.dumps(status.as_json(), indent=2))
    else:
        print_text(status, namespace is None)
    return 0


def _current_namespace(kubeconfig: str | None, context: str) -> str | None:
    """The namespace of the kube context (kubectl's default), or None (= all namespaces) if unset."""
    contexts, _ = kubeapi.contexts(kubeconfig)
    for entry in contexts:
        if entry["name"] == context:
            return dig(entry, "context", "namespace")
    return None
