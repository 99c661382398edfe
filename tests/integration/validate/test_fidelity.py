"""validate's verdicts equal a real kube-apiserver's, case by case (slow: starts etcd + kube-apiserver).

Every corpus case is sent to the API server with `kubectl create --dry-run=server
--validate=strict` and validated with `trainstack validate --strict`; accept/reject must agree.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from support.corpus import CASES, Case, inputs
from trainstack.validate import command

pytestmark = pytest.mark.slow


def _url(case: Case, catalog) -> str:
    """The collection URL a raw POST of the case goes to."""
    data = json.loads(case.text)
    info = catalog.lookup(data["apiVersion"], data["kind"])
    base = f"/api/{info.version}" if not info.group else f"/apis/{info.group}/{info.version}"
    namespace = data["metadata"].get("namespace")
    return f"{base}/namespaces/{namespace}/{info.plural}" if info.namespaced else f"{base}/{info.plural}"


@pytest.fixture(scope="module")
def server_verdicts(apiserver, catalog, tmp_path_factory) -> dict[str, tuple[bool, str]]:
    folder = tmp_path_factory.mktemp("fidelity")

    def ask(case: Case) -> tuple[str, tuple[bool, str]]:
        path = folder / f"{case.id}.{case.suffix}"
        path.write_text(case.text)
        return case.id, (apiserver.create_raw(path, _url(case, catalog)) if case.raw else apiserver.create(path))

    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(pool.map(ask, CASES))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_verdict_matches_the_api_server(case: Case, server_verdicts, tmp_path: Path):
    accepted, server_message = server_verdicts[case.id]
    _, args = inputs(case, tmp_path)
    code, out = command.run([*args, "--strict", "--output", "json"])
    ours = json.loads(out)
    errors = [f["message"] for f in ours["findings"] if f["severity"] == "error"]
    assert (code == 0) == accepted, (
        f"{case.id}: kube-apiserver {'accepted' if accepted else 'rejected'} ({server_message}); "
        f"validate exit {code}: {errors}")
    assert ("accept" if accepted else "reject") == case.expect, f"{case.id}: the corpus expectation is wrong"


# -- ValidatingAdmissionPolicies: the same policies installed in the API server -----------------
from support.policy_corpus import CASES as POLICY_CASES
from support.policy_corpus import POLICIES, SETUP, PolicyCase, run_policy_case


@pytest.fixture(scope="module")
def policy_server(apiserver, tmp_path_factory):
    """The API server with the test policies installed and in force (they take a moment to load)."""
    import time

    apiserver.install(SETUP, wait_crds=False)
    apiserver.install(POLICIES, wait_crds=False)
    probe = tmp_path_factory.mktemp("probe") / "probe.yaml"
    probe.write_text(POLICY_CASES[1].text.replace("name: noteam", "name: probe"))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        accepted, _ = apiserver.create(probe)
        if not accepted:
            break
        time.sleep(0.5)
    else:
        pytest.fail("the ValidatingAdmissionPolicies did not take effect within 60s")
    time.sleep(2)  # the other policies are loaded by the same informer; give it a moment more
    return apiserver


@pytest.mark.parametrize("case", POLICY_CASES, ids=[c.id for c in POLICY_CASES])
def test_policy_verdict_matches_the_api_server(case: PolicyCase, policy_server, tmp_path: Path):
    path = tmp_path / "object.yaml"
    path.write_text(case.text)
    result = policy_server.kubectl("create", "--dry-run=server", "--validate=strict", "-o", "name", "-f", str(path),
                                   check=False)
    if result.returncode != 0:
        server = "reject"
    elif "Warning:" in result.stderr:
        server = "warn"
    else:
        server = "accept"
    folder = tmp_path / "inputs"
    folder.mkdir()
    _, ours, messages, _ = run_policy_case(case, folder)
    assert ours == server, f"{case.id}: kube-apiserver: {server} ({result.stderr.strip()}); validate: {ours} {messages}"
    assert server == case.expect
    if case.fragment:
        assert case.fragment in result.stderr
