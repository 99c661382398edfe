"""The tracking server's accounts (the chart's `tracking`; docs/tracking.md).

`accounts.py admin`: the init container. Makes sure the admin credential exists: a Secret in the
release namespace, created once with a random password (MLflow ships no default one) and the web
UI's session key, never changed by the chart, so every later start and `helm upgrade` uses the same.

`accounts.py sync`: the sidecar. Every SYNC_SECONDS, for each tracked namespace (a team's, or one of
`tracking.namespaces`, listed in NAMESPACES_FILE): the namespace's `trainstack-tracking` Secret
(username: the namespace; a random password, created once), an MLflow user of that name and
password, an experiment named after the namespace, and that user's MANAGE permission on it. The
server denies everything else (`default_permission = NO_PERMISSIONS`), so a team reads only its own
experiment. The sidecar is ready once a pass has gone through every namespace.

Standard library and the image's MLflow only; the Kubernetes API through the pod's ServiceAccount.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import signal
import ssl
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

SA = Path("/var/run/secrets/kubernetes.io/serviceaccount")
USERNAME_KEY, PASSWORD_KEY = "username", "password"
SESSION_KEY = "sessionKey"  # signs the web UI's sessions (MLFLOW_FLASK_SERVER_SECRET_KEY)
ADMIN = "admin"


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} accounts: {message}", file=sys.stderr, flush=True)


class Kube:
    """The Kubernetes API as this pod's ServiceAccount (GET and POST of Secrets is all it needs)."""

    def __init__(self) -> None:
        host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
        self.base = f"https://{host}:{port}" if ":" not in host else f"https://[{host}]:{port}"
        self.context = ssl.create_default_context(cafile=str(SA / "ca.crt"))

    def call(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        token = (SA / "token").read_text().strip()  # re-read: the kubelet rotates it
        request = urllib.request.Request(self.base + path, method=method,
                                         data=json.dumps(body).encode() if body is not None else None,
                                         headers={"Authorization": f"Bearer {token}",
                                                  "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, context=self.context, timeout=30) as response:
                return response.status, json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as err:
            return err.code, {}

    def secret(self, namespace: str, name: str, labels: dict[str, str], make: dict[str, str]) -> dict[str, str]:
        """The Secret's data (decoded); created with MAKE when it does not exist (never overwritten)."""
        status, found = self.call("GET", f"/api/v1/namespaces/{namespace}/secrets/{name}")
        if status == 404:
            body = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                    "metadata": {"name": name, "namespace": namespace, "labels": labels},
                    "stringData": make}
            status, _ = self.call("POST", f"/api/v1/namespaces/{namespace}/secrets", body)
            if status == 201:
                log(f"created Secret {namespace}/{name}")
                return dict(make)
            if status != 409:  # 409: made meanwhile (another pod); read it
                raise RuntimeError(f"creating Secret {namespace}/{name}: HTTP {status}")
            status, found = self.call("GET", f"/api/v1/namespaces/{namespace}/secrets/{name}")
        if status != 200:
            raise RuntimeError(f"reading Secret {namespace}/{name}: HTTP {status}")
        return {k: base64.b64decode(v).decode() for k, v in (found.get("data") or {}).items()}


def password() -> str:
    return secrets.token_urlsafe(24)  # 32 characters; MLflow asks for at least 12


def labels() -> dict[str, str]:
    return {"app.kubernetes.io/part-of": "trainstack", "app.kubernetes.io/component": "tracking"}


def admin() -> int:
    """Init container: the admin Secret exists (made once) before the server starts with it."""
    namespace = (SA / "namespace").read_text().strip()
    Kube().secret(namespace, os.environ["ADMIN_SECRET"], labels(),
                  {USERNAME_KEY: ADMIN, PASSWORD_KEY: password(), SESSION_KEY: secrets.token_hex(32)})
    return 0


def wait_for_server(uri: str, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"{uri}/health", timeout=5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(2)


class Accounts:
    """One pass makes each namespace's Secret, user, experiment and permission; passwords already set
    by this process are not set again unless the Secret changed (the server hashes each one)."""

    def __init__(self, uri: str) -> None:
        import mlflow  # the image's; imported here, after the server answers
        from mlflow.server import get_app_client

        self.kube = Kube()
        self.client = mlflow.MlflowClient(uri)
        self.auth = get_app_client("basic-auth", tracking_uri=uri)
        self.applied: dict[str, str] = {}  # namespace -> the password this process set

    def ensure(self, namespace: str) -> None:
        from mlflow.exceptions import MlflowException, RestException

        data = self.kube.secret(namespace, os.environ["TEAM_SECRET"], labels(),
                                {USERNAME_KEY: namespace, PASSWORD_KEY: password()})
        user, secret = data.get(USERNAME_KEY, namespace), data.get(PASSWORD_KEY, "")
        if len(secret) < 12:
            raise RuntimeError(f"Secret {namespace}/{os.environ['TEAM_SECRET']}: `password` has under 12 characters")
        if self.applied.get(namespace) != secret:
            try:
                self.auth.get_user(user)
                self.auth.update_user_password(user, secret)
            except RestException as err:
                if err.error_code != "RESOURCE_DOES_NOT_EXIST":
                    raise
                self.auth.create_user(user, secret)
                log(f"created user {user}")
            self.applied[namespace] = secret
        experiment = self.client.get_experiment_by_name(namespace)
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(namespace)
        try:
            granted = self.auth.get_user_permission(user, "experiment", experiment_id).permission
        except MlflowException:
            granted = None
        if granted != "MANAGE":
            self.auth.grant_user_permission(user, "experiment", experiment_id, "MANAGE")
            log(f"granted {user} MANAGE on experiment {namespace} ({experiment_id})")

    def sync(self, namespaces: list[str]) -> list[str]:
        """One pass; the namespaces that failed (each logged in one line)."""
        failed = []
        for namespace in namespaces:
            try:
                self.ensure(namespace)
            except Exception as err:  # noqa: BLE001 (one namespace's trouble must not stop the others)
                failed.append(namespace)
                log(f"{namespace}: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
        return failed


def sync() -> int:
    uri = f"http://127.0.0.1:{os.environ['PORT']}"
    wait_for_server(uri)
    accounts = Accounts(uri)
    ready = Path(os.environ.get("READY_FILE", "/tmp/accounts-ready"))
    interval = float(os.environ.get("SYNC_SECONDS", "30"))
    while True:
        namespaces = json.loads(Path(os.environ["NAMESPACES_FILE"]).read_text())
        failed = accounts.sync(namespaces)
        if not failed:
            ready.touch()
        time.sleep(interval)


def stop_on_sigterm() -> None:
    """Exit at once on SIGTERM. Each command is its container's PID 1, and the kernel drops a signal that PID 1
    has no handler for: without one, the kubelet waits out the pod's grace period (30 s) on every stop, an
    upgrade's Recreate included, and then kills it. A pass stopped midway is redone whole by the next start."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))


if __name__ == "__main__":
    stop_on_sigterm()
    commands = {"admin": admin, "sync": sync}
    if len(sys.argv) != 2 or sys.argv[1] not in commands:
        print(f"usage: accounts.py {'|'.join(commands)}", file=sys.stderr)
        sys.exit(2)
    sys.exit(commands[sys.argv[1]]())
