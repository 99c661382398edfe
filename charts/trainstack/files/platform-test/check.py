"""trainstack's `helm test`: is the installed platform working? Run by the chart's test pod
(templates/platform-test.yaml) with python3's standard library only, as its ServiceAccount.

What it checks, each one line (`ok` or `FAIL`), exit 1 when one fails:
- every golden ClusterTrainingRuntime the release renders is served by the API server;
- a TrainJob on a golden CPU runtime is admitted: a server-side dry run (nothing is created) that
  passes the Trainer and JobSet webhooks and every ValidatingAdmissionPolicy of the release;
- with the imageTag rule on: the same TrainJob with a `:latest` image is answered by the policy
  (denied where the rule denies, warned where it only warns).
The objects and what to expect come from the chart (spec.json beside this file).
"""

import json
import os
import ssl
import sys
import urllib.error
import urllib.request

ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
TRAINER = "/apis/trainer.kubeflow.org/v1alpha1"


def call(method, path, body=None):
    """(status, decoded body, warnings) of one API request."""
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
    if ":" in host:
        host = f"[{host}]"
    with open(f"{ACCOUNT}/token") as handle:
        token = handle.read().strip()
    request = urllib.request.Request(
        f"https://{host}:{port}{path}", method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {token}", "Accept": "application/json",
                 "Content-Type": "application/json"})
    context = ssl.create_default_context(cafile=f"{ACCOUNT}/ca.crt")
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as response:
            return response.status, json.loads(response.read() or b"{}"), response.headers.get_all("Warning") or []
    except urllib.error.HTTPError as err:
        try:
            payload = json.loads(err.read() or b"{}")
        except ValueError:
            payload = {}
        return err.code, payload, err.headers.get_all("Warning") or []


def dry_run(job):
    path = f"{TRAINER}/namespaces/{job['metadata']['namespace']}/trainjobs?dryRun=All&fieldManager=trainstack-test"
    return call("POST", path, job)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "spec.json")) as handle:
        spec = json.load(handle)
    failed = []

    def report(ok, what):
        print(f"{'ok  ' if ok else 'FAIL'} {what}", flush=True)
        if not ok:
            failed.append(what)

    status, listed, _ = call("GET", f"{TRAINER}/clustertrainingruntimes")
    served = {item["metadata"]["name"] for item in listed.get("items", [])} if status == 200 else set()
    missing = sorted(set(spec["runtimes"]) - served)
    report(status == 200 and not missing,
           f"golden runtimes served: {len(spec['runtimes']) - len(missing)} of {len(spec['runtimes'])}"
           + (f" (missing: {', '.join(missing)})" if missing else "")
           + ("" if status == 200 else f" (list answered {status}: {listed.get('message', '')})"))

    good = spec["admitted"]
    status, answer, warnings = dry_run(good)
    report(status in (200, 201),
           f"TrainJob on {good['spec']['runtimeRef']['name']} admitted (dry run, webhooks and policies): "
           + (f"{status}" if status in (200, 201) else f"{status} {answer.get('message', '')}")
           + (f"; warnings: {' | '.join(warnings)}" if warnings else ""))

    bad = spec.get("refused")
    if bad:
        policy, deny = spec["refusedBy"], spec["deny"]
        status, answer, warnings = dry_run(bad)
        message = str(answer.get("message", ""))
        if deny:
            ok = status in (400, 403, 422) and policy in message
            said = f"denied ({status}): {message}" if ok else f"{status}, not denied by {policy}: {message}"
        else:
            ok = status in (200, 201) and any(policy in w for w in warnings)
            said = f"warned: {' | '.join(warnings)}" if ok else f"{status}, no warning from {policy}: {message}"
        report(ok, f"TrainJob with image {bad['spec']['trainer']['image']}: {said}")

    if failed:
        print(f"{len(failed)} check(s) failed", flush=True)
        return 1
    print("the platform works", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
