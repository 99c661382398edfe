"""ValidatingAdmissionPolicies, bindings, params and the objects they judge.

Used by test_policies.py (validate --policies, fast) and test_fidelity.py (the same objects
sent to a real kube-apiserver with the same policies installed, slow).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from trainstack.validate import command

NS = "policy-ns"

SETUP = f"""apiVersion: v1
kind: Namespace
metadata:
  name: {NS}
  labels:
    policy-test: "true"
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: limits
  namespace: {NS}
data:
  max: "3"
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: allowed-tiers
  namespace: {NS}
  labels:
    policy-params: tiers
data:
  tiers: gold,silver
"""

POLICIES = f"""apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: test-team-label
spec:
  failurePolicy: Fail
  matchConstraints:
    namespaceSelector:
      matchLabels:
        policy-test: "true"
    resourceRules:
      - apiGroups: [""]
        apiVersions: [v1]
        operations: [CREATE, UPDATE]
        resources: [configmaps]
  matchConditions:
    - name: not-params
      expression: "!has(object.metadata.labels) || !('policy-params' in object.metadata.labels)"
  validations:
    - expression: "has(object.metadata.labels) && 'team' in object.metadata.labels"
      message: configmaps in policy-test namespaces need a team label
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: test-team-label
spec:
  policyName: test-team-label
  validationActions: [Deny]
  matchResources:
    objectSelector:
      matchExpressions:
        - {{key: skip-policy, operator: DoesNotExist}}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: test-max-keys
spec:
  failurePolicy: Fail
  paramKind: {{apiVersion: v1, kind: ConfigMap}}
  matchConstraints:
    resourceRules:
      - apiGroups: [""]
        apiVersions: [v1]
        operations: [CREATE]
        resources: [configmaps]
  variables:
    - name: keys
      expression: "has(object.data) ? size(object.data) : 0"
  validations:
    - expression: "variables.keys <= int(params.data.max)"
      messageExpression: "'configmap ' + object.metadata.name + ' has ' + string(variables.keys) + ' keys, more than ' + params.data.max"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: test-max-keys
spec:
  policyName: test-max-keys
  validationActions: [Deny]
  paramRef:
    name: limits
    namespace: {NS}
    parameterNotFoundAction: Deny
  matchResources:
    namespaceSelector:
      matchLabels:
        policy-test: "true"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: test-tier
spec:
  failurePolicy: Fail
  paramKind: {{apiVersion: v1, kind: ConfigMap}}
  matchConstraints:
    resourceRules:
      - apiGroups: [""]
        apiVersions: [v1]
        operations: [CREATE]
        resources: [services]
  matchConditions:
    - name: not-external
      expression: "object.spec.type != 'ExternalName'"
  validations:
    - expression: "has(object.metadata.labels) && 'tier' in object.metadata.labels && object.metadata.labels.tier in params.data.tiers.split(',')"
      messageExpression: "'service tier must be one of ' + params.data.tiers"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: test-tier
spec:
  policyName: test-tier
  validationActions: [Warn]
  paramRef:
    selector:
      matchLabels:
        policy-params: tiers
    parameterNotFoundAction: Allow
  matchResources:
    namespaceSelector:
      matchLabels:
        policy-test: "true"
"""


@dataclass(frozen=True)
class PolicyCase:
    id: str
    text: str
    expect: str  # accept | reject | warn
    fragment: str = ""  # part of the policy message


def _cm(name: str, labels: str = "", data: str = "  a: '1'\n") -> str:
    return f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {NS}\n{labels}data:\n{data}"


def _svc(name: str, labels: str = "", kind: str = "ClusterIP") -> str:
    extra = "  externalName: example.com\n" if kind == "ExternalName" else "  ports:\n    - port: 80\n"
    return (f"apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: {NS}\n{labels}"
            f"spec:\n  type: {kind}\n{extra}")


TEAM = "  labels:\n    team: ml\n"

CASES = [
    PolicyCase("team-label-present", _cm("good", TEAM), "accept"),
    PolicyCase("team-label-missing", _cm("noteam"), "reject", "need a team label"),
    PolicyCase("team-label-object-selector-skips", _cm("skipped", "  labels:\n    skip-policy: 'yes'\n"), "accept"),
    PolicyCase("match-condition-skips-params", _cm("params-like", "  labels:\n    policy-params: other\n"), "accept"),
    PolicyCase("max-keys-exceeded", _cm("many", TEAM, "  a: '1'\n  b: '2'\n  c: '3'\n  d: '4'\n"), "reject",
               "has 4 keys, more than 3"),
    PolicyCase("max-keys-at-limit", _cm("three", TEAM, "  a: '1'\n  b: '2'\n  c: '3'\n"), "accept"),
    PolicyCase("tier-warns", _svc("no-tier"), "warn", "service tier must be one of gold,silver"),
    PolicyCase("tier-ok", _svc("gold-svc", "  labels:\n    tier: gold\n"), "accept"),
    PolicyCase("tier-bad-value-warns", _svc("bronze", "  labels:\n    tier: bronze\n"), "warn", "gold,silver"),
    PolicyCase("tier-external-name-skipped", _svc("ext", kind="ExternalName"), "accept"),
]


def _verdict(findings: list[dict], name: str) -> tuple[str, list[str]]:
    mine = [f for f in findings if f["name"] == name and f["rule"] == "policy"]
    if any(f["severity"] == "error" for f in mine):
        return "reject", [f["message"] for f in mine]
    if mine:
        return "warn", [f["message"] for f in mine]
    return "accept", []


def run_policy_case(case: PolicyCase, folder: Path) -> tuple[int, str, list[str], dict]:
    (folder / "00-setup.yaml").write_text(SETUP + "---\n" + POLICIES)
    (folder / "10-case.yaml").write_text(case.text)
    code, out = command.run([str(folder), "--policies", "-o", "json"])
    result = json.loads(out)
    name = next(ln.split(": ", 1)[1] for ln in case.text.splitlines() if ln.startswith("  name: "))
    verdict, messages = _verdict(result["findings"], name)
    return code, verdict, messages, result
