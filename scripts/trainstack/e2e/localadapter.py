"""The local provider's host-process controllers kept reachable through helm install, upgrade and
rollback (wired into an UpgradeTest by upgrade.for_suite)."""

from __future__ import annotations

import json
import time
from typing import Any

from .. import kubeapi, proc
from ..jsontypes import dig
from .base import NAMESPACE

WEBHOOK_KINDS = ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")


class LocalAdapter:
    """Keeps the local provider's host-process controllers reachable while helm changes the release.

    On KWOK nodes the chart's controllers run as local processes, and their webhook Services and
    configurations are re-pointed at them after install (the provider's `while_installing`). `helm
    upgrade` and `helm rollback` put the chart's Service and webhook client config back; this
    re-points them as soon as helm has written them, while helm waits. The webhook gap measured
    on KWOK therefore includes this re-pointing (on a real node the controllers are pods and
    nothing is re-pointed)."""

    def __init__(self, provider: Any, suite: Any) -> None:
        self.provider, self.suite = provider, suite
        self.repointed = 0

    def adapt(self, binary: str, verb: str, process: proc.Popen) -> None:
        if getattr(self.provider, "real", False):
            return
        if verb == "install" or self.provider.controllers is None:
            self.provider.while_installing(self.suite, process)
            return
        # helm writes the Services and webhook configurations while it runs: watch them and re-point on a
        # change (the first list of each watch counts as one); the 0.2s tick only looks at helm's process
        api = kubeapi.for_kube(self.provider.cluster)
        deadline = time.monotonic() + 600
        with kubeapi.Changes(600) as changes:
            changes.watch("services", api, kubeapi.resource(api, "services", NAMESPACE))
            for kind in WEBHOOK_KINDS:
                changes.watch(kind, api, kubeapi.resource(api, kind))
            while process.poll() is None and time.monotonic() < deadline:
                if changes.changed(0.2) and self.diverged():
                    self.provider.controllers.point_webhooks_here()
                    self.repointed += 1
        if self.diverged():
            self.provider.controllers.point_webhooks_here()
            self.repointed += 1

    def prepare(self, binary: str, verb: str) -> None:
        """Before helm upgrade/rollback: drop the field ownership of the local re-pointing (manager
        kubectl-patch) on the chart's Services and webhook configurations, so helm (server-side apply in
        v4) takes its fields back as on a cluster where nobody re-pointed them. Without this, helm v4
        reports a conflict on Service .spec.type that only the local adaptation causes."""
        if verb not in ("upgrade", "rollback") or getattr(self.provider, "real", False) or not self.provider.controllers:
            return
        cluster = self.provider.cluster
        names = [n for ctl in self.provider.controllers.controllers for n in ctl.services]
        targets = [("service", n, NAMESPACE) for n in names]
        for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
            targets += [(kind, c["metadata"]["name"], "") for c in cluster.kubectl_json("get", kind)["items"]]
        for kind, name, ns in targets:
            ns_args = ["-n", ns] if ns else []
            obj = cluster.kubectl_json("get", kind, name, *ns_args, "--show-managed-fields")
            managed = obj["metadata"].get("managedFields") or []
            kept = [m for m in managed if m.get("manager") != "kubectl-patch"]
            if len(kept) != len(managed):
                cluster.kubectl("patch", kind, name, *ns_args, "--type=merge",
                                "-p", json.dumps({"metadata": {"managedFields": kept or [{}]}}))

    def diverged(self) -> bool:
        from urllib3.exceptions import HTTPError  # slow to import: only when a local cluster runs (see kubeapi)

        ctls = self.provider.controllers
        cluster = self.provider.cluster
        api = kubeapi.for_kube(cluster)
        try:
            services = {s["metadata"]["name"]: s
                        for s in kubeapi.items(api, kubeapi.resource(api, "services", NAMESPACE))}
            configs = [c for kind in WEBHOOK_KINDS for c in kubeapi.items(api, kubeapi.resource(api, kind))]
        except (kubeapi.ApiException, HTTPError):  # the API server busy or away: look again on the next change
            return False
        ports = {name: ctl.webhook_port for ctl in ctls.controllers for name in ctl.services}
        if any(dig(services.get(n, {}), "spec", "type") != "ExternalName" for n in ports):
            return True
        bundle = cluster.ca_bundle()
        for config in configs:
            for hook in config.get("webhooks") or []:
                client = hook.get("clientConfig") or {}
                ref = client.get("service") or {}
                if ref.get("namespace") == NAMESPACE and ref.get("name") in ports and (
                        ref.get("port") != ports[ref["name"]] or client.get("caBundle") != bundle):
                    return True
        return False

    def after_uninstall(self) -> None:
        if getattr(self.provider, "real", False):
            return
        self.provider.after_uninstall(self.suite)
        self.provider.controllers = None
