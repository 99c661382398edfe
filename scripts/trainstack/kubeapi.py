"""The kubernetes Python client, for what trainstack reads, watches and waits on.

One place for how a client is made (a kubeconfig and, optionally, a context), its request
timeouts and its retries, and for waiting by watching instead of polling. The pinned kubectl and
helm stay where the user's own path is the CLI (`helm install`, `kubectl apply --server-side`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .errors import UserError

# (connect, read) seconds for one request; a watch adds its own window to the read timeout.
REQUEST_TIMEOUT = (10, 60)
# Idempotent requests (urllib3's default methods: GET, PUT, DELETE, HEAD, OPTIONS) are retried on
# a refused connection or an overloaded server; a create is never sent twice.
RETRY_STATUSES = (429, 500, 502, 503, 504)


def client(kubeconfig: Path | str | None = None, context: str | None = None, pool: int | None = None) -> Any:
    """An ApiClient for KUBECONFIG's CONTEXT (the current one when None), with retries."""
    from kubernetes import config
    from kubernetes.config.config_exception import ConfigException
    from urllib3.util.retry import Retry

    try:
        api = config.new_client_from_config(config_file=str(kubeconfig) if kubeconfig else None, context=context)
    except (ConfigException, OSError, TypeError) as err:
        where = kubeconfig or "KUBECONFIG / ~/.kube/config"
        raise UserError(f"no usable kube context in {where}: {str(err).splitlines()[0]}",
                        "set KUBECONFIG or pass --kubeconfig/--context") from None
    api.configuration.retries = Retry(total=5, connect=5, read=2, backoff_factor=0.2,
                                      status_forcelist=RETRY_STATUSES, raise_on_status=False)
    api.rest_client.pool_manager.connection_pool_kw["retries"] = api.configuration.retries
    if pool:
        api.configuration.connection_pool_maxsize = pool
        api.rest_client.pool_manager.connection_pool_kw["maxsize"] = pool
    return api


def custom_objects(api: Any, group: str, version: str, plural: str, namespace: str | None = None
                   ) -> Callable[..., Any]:
    """The list call (watchable) of a custom resource, namespaced or cluster-wide."""
    from kubernetes import client as k8s

    objects = k8s.CustomObjectsApi(api)
    if namespace is None:
        def listed(**kwargs: Any) -> Any:
            return objects.list_cluster_custom_object(group, version, plural, **kwargs)
    else:
        def listed(**kwargs: Any) -> Any:
            return objects.list_namespaced_custom_object(group, version, namespace, plural, **kwargs)
    return listed


def _as_dict(api: Any, obj: Any) -> dict[str, Any]:
    return obj if isinstance(obj, dict) else api.sanitize_for_serialization(obj)


def snapshots(api: Any, list_call: Callable[..., Any], timeout: float, tick: float = 5.0,
              **selectors: Any) -> Iterator[dict[str, dict[str, Any]]]:
    """The objects of LIST_CALL by name: once listed, then after every change a watch reports, and
    at least every TICK seconds, until TIMEOUT seconds have passed (the caller stops early by
    breaking out). A watch that expires (410 Gone) lists again; a dropped connection reconnects.
    SELECTORS are passed to the list and the watch (label_selector=..., field_selector=...)."""
    from kubernetes import watch
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


def for_kube(kube: Any) -> Any:
    """An ApiClient for what a LocalCluster or a Kubectl talks to (its kubeconfig and context)."""
    return client(kube.kubeconfig, getattr(kube, "context", None))


def pods(api: Any) -> Callable[..., Any]:
    """The namespaced pod list call (watchable); pass namespace= and selectors to snapshots/wait_for."""
    from kubernetes import client as k8s

    return k8s.CoreV1Api(api).list_namespaced_pod
