"""The kubernetes Python client, for what trainstack reads, watches and waits on.

One place for how a client is made (a kubeconfig and, optionally, a context), its request
timeouts and its retries, and for waiting by watching instead of polling. The pinned kubectl and
helm stay where the user's own path is the CLI (`helm install`, `kubectl apply --server-side`).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from . import yamlio
from .api import GANG_GROUP, GANG_VERSION, JOBSET_API, LWS_API, TRAINER_API  # by name: `api` is the client here
from .errors import UserError

# The kubernetes client (and urllib3 under it) is imported inside the functions that use it: importing
# it takes over a second, and most commands (render, validate, lint) never talk to a cluster.

# (connect, read) seconds for one request; a watch adds its own window to the read timeout.
REQUEST_TIMEOUT = (10, 60)
# Idempotent requests (urllib3's default methods: GET, PUT, DELETE, HEAD, OPTIONS) are retried on
# a refused connection or an overloaded server; a create is never sent twice.
RETRY_STATUSES = (429, 500, 502, 503, 504)


def __getattr__(name: str) -> Any:
    """kubeapi.ApiException: the kubernetes client's error answer (.status, .reason, .body), imported
    when first named, so a module can catch it without importing the client itself."""
    if name == "ApiException":
        from kubernetes.client.exceptions import ApiException  # heavy: see the note at the top

        return ApiException
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def contexts(kubeconfig: Path | str | None = None) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The contexts of KUBECONFIG (default: KUBECONFIG, then ~/.kube/config) and the current one, as
    kubectl reads them; a UserError when there is no usable kubeconfig."""
    from kubernetes import config  # heavy: see the note at the top
    from kubernetes.config.config_exception import ConfigException

    try:
        return config.list_kube_config_contexts(config_file=str(kubeconfig) if kubeconfig else None)
    except (ConfigException, OSError, TypeError, AttributeError, yaml.YAMLError) as err:
        where = kubeconfig or "KUBECONFIG / ~/.kube/config"
        raise UserError(f"no usable kube context in {where}: {config_error(err)}",
                        "set KUBECONFIG or pass --kubeconfig/--context") from None


def client(kubeconfig: Path | str | None = None, context: str | None = None, pool: int | None = None,
           retry_statuses: tuple[int, ...] = RETRY_STATUSES) -> Any:
    """An ApiClient for KUBECONFIG's CONTEXT (the current one when None), with retries: on a refused connection,
    and on the answers in RETRY_STATUSES."""
    from kubernetes import config  # heavy: see the note at the top
    from kubernetes.config.config_exception import ConfigException
    from urllib3.util.retry import Retry

    try:
        # KUBECONFIG as it is now (the client reads it once, when imported), else ~/.kube/config
        source = str(kubeconfig) if kubeconfig else os.environ.get("KUBECONFIG") or None
        api = config.new_client_from_config(config_file=source, context=context)
    except (ConfigException, OSError, TypeError, yaml.YAMLError) as err:
        where = kubeconfig or "KUBECONFIG / ~/.kube/config"
        raise UserError(f"no usable kube context in {where}: {config_error(err)}",
                        "set KUBECONFIG or pass --kubeconfig/--context") from None
    api.configuration.retries = Retry(total=5, connect=5, read=2, backoff_factor=0.2,
                                      status_forcelist=retry_statuses, raise_on_status=False)
    api.rest_client.pool_manager.connection_pool_kw["retries"] = api.configuration.retries
    if pool:
        api.configuration.connection_pool_maxsize = pool
        api.rest_client.pool_manager.connection_pool_kw["maxsize"] = pool
    return api


def config_error(err: Exception) -> str:
    """One line for why a kubeconfig could not be used (YAML that does not parse named with its line)."""
    if isinstance(err, yaml.YAMLError):
        return f"not valid YAML: {yamlio.error_line(err)}"
    if isinstance(err, (TypeError, AttributeError)):  # YAML, but not the mapping a kubeconfig is
        return "not a kubeconfig (a YAML mapping of clusters, users and contexts)"
    return (str(err).splitlines() or [type(err).__name__])[0]


def custom_objects(api: Any, group: str, version: str, plural: str, namespace: str | None = None
                   ) -> Callable[..., Any]:
    """The list call (watchable) of a resource under /apis/GROUP/VERSION, namespaced or cluster-wide.

    Not only custom resources: any API group's objects come back as plain dicts this way
    (apps/v1 deployments, apiextensions.k8s.io/v1 customresourcedefinitions, ...), which keeps
    typed-model quirks out of the waits. The core group (pods, secrets) is kubernetes.client's."""
    from kubernetes import client as k8s  # heavy: see the note at the top

    objects = k8s.CustomObjectsApi(api)
    if namespace is None:
        def listed(**kwargs: Any) -> Any:
            return objects.list_cluster_custom_object(group, version, plural, **kwargs)
    else:
        def listed(**kwargs: Any) -> Any:
            return objects.list_namespaced_custom_object(group, version, namespace, plural, **kwargs)
    return listed


# A list call's keyword arguments (snake_case, as kubernetes.client takes them) and their query names.
_QUERY = {"label_selector": "labelSelector", "field_selector": "fieldSelector", "resource_version": "resourceVersion",
          "timeout_seconds": "timeoutSeconds", "watch": "watch", "allow_watch_bookmarks": "allowWatchBookmarks",
          "limit": "limit"}


def core_objects(api: Any, plural: str, namespace: str | None = None) -> Callable[..., Any]:
    """The list call (watchable) of a core-group (/api/v1) resource as plain dicts, like
    custom_objects: pods, nodes, secrets, namespaces, namespaced or cluster-wide."""
    path = f"/api/v1/namespaces/{namespace}/{plural}" if namespace else f"/api/v1/{plural}"

    def listed(**kwargs: Any) -> Any:
        query = [(_QUERY[k], v) for k, v in kwargs.items() if k in _QUERY and v is not None]
        return api.call_api(path, "GET", {}, query, {"Accept": "application/json"}, response_type="object",
                            auth_settings=["BearerToken"], _return_http_data_only=True,
                            _preload_content=kwargs.get("_preload_content", True),
                            _request_timeout=kwargs.get("_request_timeout"))
    return listed


def create(api: Any, obj: dict[str, Any], plural: str, dry_run: bool = False, timeout: float = 30) -> Any:
    """Create OBJ (a namespaced object of a /apis group) as PLURAL; DRY_RUN: a server-side dry run
    (admission webhooks and policies run, nothing is stored). Raises ApiException on an error answer."""
    from kubernetes import client as k8s  # heavy: see the note at the top

    group, version = obj["apiVersion"].split("/")
    return k8s.CustomObjectsApi(api).create_namespaced_custom_object(
        group, version, obj["metadata"]["namespace"], plural, obj, _request_timeout=timeout,
        **({"dry_run": "All"} if dry_run else {}))


def stream_lines(response: Any) -> Iterator[str]:
    """The lines of a streamed response (a watch read with _preload_content=False), as they arrive."""
    from kubernetes.watch.watch import iter_resp_lines  # heavy: see the note at the top

    return iter_resp_lines(response)


def _as_dict(api: Any, obj: Any) -> dict[str, Any]:
    return obj if isinstance(obj, dict) else api.sanitize_for_serialization(obj)


def snapshots(api: Any, list_call: Callable[..., Any], timeout: float, tick: float = 5.0,
              **selectors: Any) -> Iterator[dict[str, dict[str, Any]]]:
    """The objects of LIST_CALL by name: once listed, then after every change a watch reports, and
    at least every TICK seconds, until TIMEOUT seconds have passed (the caller stops early by
    breaking out). A watch that expires (410 Gone) lists again; a dropped connection reconnects.
    SELECTORS are passed to the list and the watch (label_selector=..., field_selector=...)."""
    from kubernetes import watch  # heavy: see the note at the top
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    deadline = time.monotonic() + timeout
    objects: dict[str, dict[str, Any]] = {}
    version: str | None = None
    while True:
        if version is None:
            listed = _as_dict(api, list_call(**selectors, _request_timeout=REQUEST_TIMEOUT))
            objects = {o["metadata"]["name"]: o for o in listed.get("items") or []}
            version = listed["metadata"]["resourceVersion"]
            yield objects
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        window = max(1, int(min(tick, remaining)))
        try:
            for event in watch.Watch().stream(list_call, resource_version=version, timeout_seconds=window,
                                              allow_watch_bookmarks=True,
                                              _request_timeout=(REQUEST_TIMEOUT[0], window + 10), **selectors):
                obj = _as_dict(api, event["object"])
                if event["type"] == "ERROR":
                    if obj.get("code") == 410:  # the version is too old: list again
                        version = None
                        break
                    raise UserError(f"watch failed: {obj.get('code')} {obj.get('message', '')}".strip())
                version = obj["metadata"]["resourceVersion"]
                if event["type"] == "BOOKMARK":
                    continue
                if event["type"] == "DELETED":
                    objects.pop(obj["metadata"]["name"], None)
                else:
                    objects[obj["metadata"]["name"]] = obj
                yield objects
        except ApiException as err:
            if err.status != 410:
                raise UserError(f"watch failed: {err.status} {(err.reason or '').strip()}") from None
            version = None
        except HTTPError:  # the connection dropped or timed out: watch again from the last version
            pass
        if version is not None:
            yield objects


def wait_for(api: Any, list_call: Callable[..., Any], done: Callable[[dict[str, dict[str, Any]]], Any],
             timeout: float, **selectors: Any) -> Any:
    """The first truthy DONE(objects by name) while watching LIST_CALL; None when TIMEOUT passes first."""
    for objects in snapshots(api, list_call, timeout=timeout, **selectors):
        result = done(objects)
        if result:
            return result
    return None


_CLIENTS: dict[tuple[str, int, str | None], Any] = {}


def for_kube(kube: Any) -> Any:
    """The ApiClient for what a LocalCluster or a Kubectl talks to (its kubeconfig and context), made
    once per kubeconfig file as written (a cluster started again at the same path gets a new one)."""
    path = Path(kube.kubeconfig) if kube.kubeconfig else None  # None: KUBECONFIG or ~/.kube/config
    context = getattr(kube, "context", None)
    key = (str(path), path.stat().st_mtime_ns if path and path.exists() else 0, context)
    if key not in _CLIENTS:
        _CLIENTS[key] = client(path, context)
    return _CLIENTS[key]


def pods(api: Any) -> Callable[..., Any]:
    """The namespaced pod list call (watchable); pass namespace= and selectors to snapshots/wait_for."""
    from kubernetes import client as k8s  # heavy: see the note at the top

    return k8s.CoreV1Api(api).list_namespaced_pod


def items(api: Any, list_call: Callable[..., Any], **selectors: Any) -> list[dict[str, Any]]:
    """One list of LIST_CALL (with SELECTORS), its items as dicts."""
    return _as_dict(api, list_call(**selectors, _request_timeout=REQUEST_TIMEOUT)).get("items") or []


def named(api: Any, list_call: Callable[..., Any], name: str, **selectors: Any) -> dict[str, Any] | None:
    """The object called NAME in LIST_CALL's scope, or None when there is none."""
    found = items(api, list_call, field_selector=f"metadata.name={name}", **selectors)
    return found[0] if found else None


# The API version of each resource trainstack reads by plural name (resource()). Kueue's is the
# API server's preferred one (preferred_version): it moved between the versions trainstack supports.
API_VERSIONS = {
    "pods": "v1", "nodes": "v1", "configmaps": "v1", "secrets": "v1", "namespaces": "v1", "services": "v1",
    "serviceaccounts": "v1", "persistentvolumeclaims": "v1",
    "deployments": "apps/v1", "statefulsets": "apps/v1", "jobs": "batch/v1",
    "customresourcedefinitions": "apiextensions.k8s.io/v1",
    "validatingadmissionpolicies": "admissionregistration.k8s.io/v1",
    "validatingadmissionpolicybindings": "admissionregistration.k8s.io/v1",
    "mutatingwebhookconfigurations": "admissionregistration.k8s.io/v1",
    "validatingwebhookconfigurations": "admissionregistration.k8s.io/v1",
    "trainjobs": TRAINER_API, "trainingruntimes": TRAINER_API, "clustertrainingruntimes": TRAINER_API,
    "jobsets": JOBSET_API, "leaderworkersets": LWS_API,
    "applications": "argoproj.io/v1alpha1", "applicationsets": "argoproj.io/v1alpha1",
    "podgroups": f"{GANG_GROUP}/{GANG_VERSION}",
}


def resource(api: Any, plural: str, namespace: str | None = None) -> Callable[..., Any]:
    """The list call (watchable, plain dicts) of PLURAL, a resource of API_VERSIONS."""
    return listing(api, API_VERSIONS[plural], plural, namespace)


_PREFERRED: dict[tuple[int, str], str] = {}


def preferred_version(api: Any, group: str) -> str:
    """GROUP's preferred version on the API server (what kubectl reads by default)."""
    from kubernetes import client as k8s  # heavy: see the note at the top

    key = (id(api), group)
    if key not in _PREFERRED:
        for found in k8s.ApisApi(api).get_api_versions(_request_timeout=REQUEST_TIMEOUT).groups:
            if found.name == group:
                _PREFERRED[key] = found.preferred_version.version
                break
        else:
            raise UserError(f"the API server serves no {group}")
    return _PREFERRED[key]


class Changes:
    """Wakes a waiter when any of several watched lists changes: one watch (snapshots) per list, each
    in its own thread, all setting one event; for waits that span several kinds."""

    def __init__(self, timeout: float) -> None:
        self.deadline = time.monotonic() + timeout
        self.event = threading.Event()
        self._stop = threading.Event()
        self.watched: set[Any] = set()

    def watch(self, key: Any, api: Any, list_call: Callable[..., Any], **selectors: Any) -> None:
        """Watch LIST_CALL (with SELECTORS) under KEY, once per key; its first list counts as a change."""
        if key in self.watched:
            return
        self.watched.add(key)
        threading.Thread(target=self._run, args=(api, list_call, selectors), daemon=True).start()

    def _run(self, api: Any, list_call: Callable[..., Any], selectors: dict[str, Any]) -> None:
        while not self._stop.is_set() and time.monotonic() < self.deadline:
            try:
                for _ in snapshots(api, list_call, timeout=max(1.0, self.deadline - time.monotonic()), **selectors):
                    if self._stop.is_set():
                        return
                    self.event.set()
                return
            except Exception:  # noqa: BLE001 - the API server away or busy: wake the waiter, list again in 1s
                self.event.set()
                self._stop.wait(1.0)

    def changed(self, seconds: float) -> bool:
        """Whether something changed within SECONDS (or since the last call); the next call waits anew."""
        fired = self.event.wait(max(0.0, seconds))
        self.event.clear()
        return fired

    def __enter__(self) -> Changes:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()


def listing(api: Any, api_version: str, plural: str, namespace: str | None = None) -> Callable[..., Any]:
    """The list call (watchable, plain dicts) of PLURAL in API_VERSION ("v1", "apps/v1", ...)."""
    if "/" not in api_version:
        return core_objects(api, plural, namespace)
    group, version = api_version.split("/")
    return custom_objects(api, group, version, plural, namespace)
