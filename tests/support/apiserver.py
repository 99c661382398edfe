"""A throw-away etcd + kube-apiserver on 127.0.0.1, the reference for validate's verdicts.

Self-signed certificates (openssl), a static admin token, RBAC, free ports, a temp dir; the
pinned CRDs are installed so `kubectl create --dry-run=server --validate=strict` answers for
custom resources exactly as a real cluster would. Nothing else runs: no controllers, no nodes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import yaml

from trainstack.cluster.local import free_port
from trainstack.jsontypes import dig

TOKEN = "trainstack-validate-admin-token"


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


class ApiServer:
    """etcd + kube-apiserver started in `start()`, stopped in `stop()`; `create()` asks for a verdict."""

    def __init__(self, etcd: Path, apiserver: Path, kubectl: Path) -> None:
        self.etcd_bin, self.apiserver_bin, self.kubectl_bin = etcd, apiserver, kubectl
        self.dir = Path(tempfile.mkdtemp(prefix="trainstack-apiserver-"))
        self.procs: list[subprocess.Popen] = []
        self.kubeconfig = self.dir / "kubeconfig"

    # -- lifecycle ------------------------------------------------------------------------------
    def _certs(self) -> None:
        d = self.dir
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
                 "-subj", "/CN=trainstack-test-ca", cwd=d)
        (d / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
                 "-subj", "/CN=kube-apiserver", cwd=d)
        _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", "server.crt", "-days", "2", "-extfile", "san.cnf", cwd=d)
        _openssl("genrsa", "-out", "sa.key", "2048", cwd=d)
        _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=d)
        (d / "tokens.csv").write_text(f'{TOKEN},admin,admin-uid,"system:masters"\n')

    def start(self, timeout: float = 60) -> None:
        self._certs()
        d = self.dir
        client, peer, secure = free_port(), free_port(), free_port()
        log = (d / "etcd.log").open("w")
        self.procs.append(subprocess.Popen(
            [str(self.etcd_bin), "--name", "default", "--data-dir", str(d / "etcd"),
             "--listen-client-urls", f"http://127.0.0.1:{client}", "--advertise-client-urls",
             f"http://127.0.0.1:{client}", "--listen-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-cluster", f"default=http://127.0.0.1:{peer}", "--log-level", "error",
             "--quota-backend-bytes", str(512 * 1024 * 1024)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        log = (d / "apiserver.log").open("w")
        self.procs.append(subprocess.Popen(
            [str(self.apiserver_bin), f"--etcd-servers=http://127.0.0.1:{client}", "--bind-address=127.0.0.1",
             "--advertise-address=127.0.0.1", f"--secure-port={secure}", f"--cert-dir={d / 'certs'}",
             f"--tls-cert-file={d / 'server.crt'}", f"--tls-private-key-file={d / 'server.key'}",
             f"--client-ca-file={d / 'ca.crt'}", f"--token-auth-file={d / 'tokens.csv'}",
             "--authorization-mode=RBAC", "--service-account-issuer=https://kubernetes.default.svc",
             f"--service-account-key-file={d / 'sa.pub'}", f"--service-account-signing-key-file={d / 'sa.key'}",
             "--service-cluster-ip-range=10.96.0.0/16", "--disable-admission-plugins=ServiceAccount",
             "--enable-priority-and-fairness=false", "--watch-cache=false", "--v=0"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        self.kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": f"https://127.0.0.1:{secure}",
                                                       "certificate-authority": str(d / "ca.crt")}}],
            "users": [{"name": "admin", "user": {"token": TOKEN}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "admin"}}],
        }))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for proc in self.procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"{proc.args[0]} exited early; logs in {d}")
            result = self.kubectl("get", "--raw", "/readyz", check=False)
            if result.returncode == 0 and result.stdout.strip() == "ok":
                return
            time.sleep(0.5)
        raise RuntimeError(f"kube-apiserver not ready after {timeout}s; logs in {d}")

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=5)  # a throw-away server: no need for its graceful drain
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        self.procs.clear()

    # -- requests -------------------------------------------------------------------------------
    def kubectl(self, *args: str, check: bool = True, input_text: str | None = None,
                timeout: float = 120) -> subprocess.CompletedProcess:
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig), HOME=str(self.dir))
        result = subprocess.run([str(self.kubectl_bin), "--cache-dir", str(self.dir / "kube-cache"), *args],
                                capture_output=True, text=True, env=env, input=input_text, timeout=timeout,
                                check=False)
        if check and result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result

    def install(self, manifests: str, wait_crds: bool = True) -> None:
        """Create objects (CRDs, namespaces, policies) for real and wait for CRDs to be served."""
        path = self.dir / f"install-{time.monotonic_ns()}.yaml"
        path.write_text(manifests)
        self.kubectl("create", "-f", str(path))
        if wait_crds:
            self.wait_established()

    def wait_established(self, timeout: float = 120) -> None:
        """Until every CRD reports Established (conditions appear a moment after create)."""
        deadline = time.monotonic() + timeout
        while True:
            items = json.loads(self.kubectl("get", "crd", "-o", "json").stdout)["items"]
            pending = [i["metadata"]["name"] for i in items
                       if not any(c.get("type") == "Established" and c.get("status") == "True"
                                  for c in dig(i, "status", "conditions") or [])]
            if not pending:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"CRDs not established after {timeout}s: {', '.join(pending)}")
            time.sleep(0.3)

    def create_raw(self, path: Path, url: str) -> tuple[bool, str]:
        """(accepted, message) of POSTing the file's bytes as they are (dry run, strict field validation)."""
        result = self.kubectl("create", "--raw", f"{url}?dryRun=All&fieldValidation=Strict", "-f", str(path),
                              check=False)
        return result.returncode == 0, (result.stderr or result.stdout).strip()

    def create(self, path: Path) -> tuple[bool, str]:
        """(accepted, message) of `kubectl create --dry-run=server --validate=strict -f path`."""
        result = self.kubectl("create", "--dry-run=server", "--validate=strict", "-o", "name", "-f", str(path),
                              check=False)
        return result.returncode == 0, (result.stderr or result.stdout).strip()
