"""Valid and invalid objects of every kind and every check `trainstack validate` makes.

Each case says what the API server does with it on create (`accept` or `reject`) and which
check should catch it. The fast tests assert validate agrees with `expect`; the slow fidelity
test sends every case to a real kube-apiserver (`kubectl create --dry-run=server
--validate=strict`) and asserts both verdicts agree, so `expect` is proven, not assumed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

NAMESPACE = "fidelity"


@dataclass(frozen=True)
class Case:
    id: str
    text: str
    expect: str  # accept | reject
    rule: str = ""  # the validate rule expected to fire (reject cases)
    path: str = ""  # the JSON pointer expected on that finding
    suffix: str = "yaml"
    # raw: POST the file's bytes as they are (JSON), so the API server itself sees duplicate
    # fields; kubectl would convert YAML to JSON first and silently keep the last value.
    raw: bool = False
    crd: bool = False  # needs GADGET_CRD (installed in the API server, passed to validate as an input)


def _pod_template(container: str = "      - name: main\n        image: busybox:1.36\n", labels: str = "app: web",
                  indent: str = "") -> str:
    body = (f"template:\n  metadata:\n    labels: {{{labels}}}\n  spec:\n    containers:\n"
            + container.replace("      - ", "    - ", 1).replace("\n        ", "\n      "))
    return "".join(indent + line + "\n" for line in body.splitlines())


def deployment(name: str = "web", spec_extra: str = "", container: str | None = None, labels: str = "app: web",
               meta_extra: str = "") -> str:
    container = container or "      - name: main\n        image: busybox:1.36\n"
    return (f"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: {NAMESPACE}\n{meta_extra}"
            f"spec:\n  replicas: 2\n  selector:\n    matchLabels: {{app: web}}\n{spec_extra}"
            + _pod_template(container, labels, "  "))


def trainjob(spec: str = "  runtimeRef:\n    name: torch-distributed\n", name: str = "tj") -> str:
    return (f"apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata:\n  name: {name}\n"
            f"  namespace: {NAMESPACE}\nspec:\n{spec}")


def runtime(kind: str = "ClusterTrainingRuntime", ml_policy: str = "    numNodes: 1\n    torch: {}\n",
            jobs: str | None = None, extra: str = "") -> str:
    jobs = jobs or ("        - name: node\n          template:\n            spec:\n              template:\n"
                    "                spec:\n                  containers:\n                    - name: node\n"
                    "                      image: pytorch/pytorch:2\n")
    ns = f"  namespace: {NAMESPACE}\n" if kind == "TrainingRuntime" else ""
    return (f"apiVersion: trainer.kubeflow.org/v1alpha1\nkind: {kind}\nmetadata:\n  name: rt\n{ns}spec:\n"
            f"  mlPolicy:\n{ml_policy}  template:\n    spec:\n{extra}      replicatedJobs:\n{jobs}")


def jobset(extra: str = "", jobs: str | None = None) -> str:
    jobs = jobs or ("    - name: workers\n      replicas: 2\n      template:\n        spec:\n          template:\n"
                    "            spec:\n              restartPolicy: Never\n              containers:\n"
                    "                - name: main\n                  image: busybox:1.36\n")
    return (f"apiVersion: jobset.x-k8s.io/v1alpha2\nkind: JobSet\nmetadata:\n  name: js\n  namespace: {NAMESPACE}\n"
            f"spec:\n{extra}  replicatedJobs:\n{jobs}")


def lws(spec: str = "") -> str:
    spec = spec or ("  replicas: 1\n  leaderWorkerTemplate:\n    size: 2\n    workerTemplate:\n      spec:\n"
                    "        containers:\n          - name: worker\n            image: busybox:1.36\n")
    return (f"apiVersion: leaderworkerset.x-k8s.io/v1\nkind: LeaderWorkerSet\nmetadata:\n  name: lws\n"
            f"  namespace: {NAMESPACE}\nspec:\n{spec}")


def application(spec: str = "") -> str:
    spec = spec or ("  project: default\n  source:\n    repoURL: https://example.com/repo.git\n    path: overlays/dev\n"
                    "    targetRevision: main\n  destination:\n    server: https://kubernetes.default.svc\n"
                    "    namespace: kubeflow-system\n")
    return (f"apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: app\n  namespace: {NAMESPACE}\n"
            f"spec:\n{spec}")


APPSET = f"""apiVersion: argoproj.io/v1alpha1
kind: ApplicationSet
metadata:
  name: envs
  namespace: {NAMESPACE}
spec:
  generators:
    - list:
        elements:
          - env: dev
          - env: prod
  template:
    metadata:
      name: 'trainstack-{{{{env}}}}'
    spec:
      project: default
      source:
        repoURL: https://example.com/repo.git
        path: 'overlays/{{{{env}}}}'
        targetRevision: main
      destination:
        server: https://kubernetes.default.svc
        namespace: kubeflow-system
"""

APPPROJECT = f"""apiVersion: argoproj.io/v1alpha1
kind: AppProject
metadata:
  name: platform
  namespace: {NAMESPACE}
spec:
  sourceRepos: ['*']
  destinations:
    - namespace: '*'
      server: https://kubernetes.default.svc
"""


# A CRD that uses every structural-schema feature the pinned CRDs do not (nullable, embedded
# resources, int-or-string, list-type set/map, defaults feeding `required` and CEL, formats,
# messageExpression/fieldPath/reason, a transition rule that must be skipped on create).
GADGET_CRD = """apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.test.trainstack.io
spec:
  group: test.trainstack.io
  names: {kind: Gadget, plural: gadgets, singular: gadget, listKind: GadgetList}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-validations:
            - rule: "self.metadata.name.startsWith('g')"
              message: gadget names start with g
          properties:
            spec:
              type: object
              required: [size, mode]
              x-kubernetes-validations:
                - rule: "!has(self.maxSize) || self.size <= self.maxSize"
                  messageExpression: "'size exceeds maxSize in ' + self.mode + ' mode'"
                  fieldPath: .size
                - rule: "self.mode == 'fast' || !has(self.turbo)"
                  message: turbo needs mode fast
                  reason: FieldValueForbidden
                - rule: "self.size >= oldSelf.size"
                  message: size may only grow
              properties:
                size: {type: integer, format: int32, minimum: 0}
                maxSize: {type: integer}
                mode: {type: string, enum: [fast, slow], default: slow, maxLength: 4}
                turbo: {type: boolean}
                port:
                  x-kubernetes-int-or-string: true
                  anyOf: [{type: integer}, {type: string}]
                note: {type: string, nullable: true, maxLength: 10}
                startAt: {type: string, format: date-time}
                code: {type: string, pattern: '^[A-Z]{3}$'}
                config: {type: object, x-kubernetes-preserve-unknown-fields: true}
                template:
                  type: object
                  x-kubernetes-embedded-resource: true
                  x-kubernetes-preserve-unknown-fields: true
                tags:
                  type: array
                  x-kubernetes-list-type: set
                  items: {type: string}
                ports:
                  type: array
                  x-kubernetes-list-type: map
                  x-kubernetes-list-map-keys: [name]
                  items:
                    type: object
                    required: [name]
                    properties:
                      name: {type: string}
                      port: {type: integer}
                labels:
                  type: object
                  additionalProperties: {type: string}
                checked:
                  type: object
                  properties:
                    value: {type: integer, default: 5}
                  x-kubernetes-validations:
                    - rule: "self.value >= 5"
                      message: value must be at least 5
"""


def gadget(spec: str, name: str = "g1") -> str:
    return (f"apiVersion: test.trainstack.io/v1\nkind: Gadget\nmetadata:\n  name: {name}\n  namespace: {NAMESPACE}\n"
            f"spec:\n{spec}")


GADGET_VALID = ("  size: 3\n  maxSize: 4\n  mode: fast\n  turbo: true\n  port: http\n  note: null\n"
                "  startAt: '2024-01-01T00:00:00Z'\n  code: ABC\n  config: {anything: {nested: [1, 2]}}\n"
                "  template:\n    apiVersion: v1\n    kind: ConfigMap\n    metadata: {name: inner}\n    data: {a: b}\n"
                "  tags: [a, b]\n  ports: [{name: a, port: 1}, {name: b, port: 2}]\n  labels: {x: z}\n"
                "  checked: {}\n")

CASES: list[Case] = [
    # -- YAML and type meta ---------------------------------------------------------------------
    Case("json-duplicate-key", '{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dup", '
         f'"namespace": "{NAMESPACE}"}}, "data": {{"a": "1", "a": "2"}}}}', "reject", "duplicate-key", "/data/a",
         suffix="json", raw=True),
    Case("json-duplicate-nested-key", '{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "dupsvc", '
         f'"namespace": "{NAMESPACE}"}}, "spec": {{"ports": [{{"port": 80, "port": 81}}]}}}}', "reject",
         "duplicate-key", "/spec/ports/0/port", suffix="json", raw=True),
    Case("json-valid", '{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fromjson", '
         f'"namespace": "{NAMESPACE}"}}, "data": {{"a": "1"}}}}', "accept", suffix="json", raw=True),
    Case("yaml-syntax", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: [\n", "reject", "yaml-syntax"),
    Case("yaml-no-kind", f"apiVersion: v1\nmetadata:\n  name: nokind\n  namespace: {NAMESPACE}\n", "reject", "type-meta"),
    Case("yaml-no-apiversion", f"kind: ConfigMap\nmetadata:\n  name: noapi\n  namespace: {NAMESPACE}\n", "reject",
         "type-meta"),
    Case("yaml-bool-y-is-boolean", f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: booly\n  namespace: {NAMESPACE}\n"
         "data:\n  enabled: y\n", "reject", "schema", "/data/enabled"),
    Case("yaml-sexagesimal-is-string", f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: sexa\n"
         f"  namespace: {NAMESPACE}\ndata:\n  time: 12:30\n", "accept"),
    Case("yaml-octal-is-int", f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: octal\n  namespace: {NAMESPACE}\n"
         "data:\n  mode: 0644\n", "reject", "schema", "/data/mode"),
    Case("yaml-nulls-are-dropped", f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: nulls\n  namespace: {NAMESPACE}\n"
         "  labels: null\n  annotations: ~\ndata: null\n", "accept"),
    # -- ConfigMap / Secret / ServiceAccount / Namespace ----------------------------------------
    Case("configmap-valid", f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: {NAMESPACE}\n"
         "  labels:\n    app.kubernetes.io/name: trainstack\n  annotations:\n    trainstack.io/owner: ml-platform\n"
         "data:\n  maxNodes: '8'\n", "accept"),
    Case("configmap-data-int", f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: dataint\n  namespace: {NAMESPACE}\n"
         "data:\n  maxNodes: 8\n", "reject", "schema", "/data/maxNodes"),
    Case("configmap-unknown-field", f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: unk\n  namespace: {NAMESPACE}\n"
         "spec: {}\n", "reject", "unknown-field", "/spec"),
    Case("configmap-bad-key", f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: badkey\n  namespace: {NAMESPACE}\n"
         "data:\n  'a b': x\n", "reject", "schema", "/data/a b"),
    Case("configmap-name-uppercase", f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: Settings\n"
         f"  namespace: {NAMESPACE}\n", "reject", "metadata", "/metadata/name"),
    Case("configmap-no-name", f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  namespace: {NAMESPACE}\n", "reject",
         "metadata", "/metadata/name"),
    Case("configmap-label-value-too-long", f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: longlabel\n"
         f"  namespace: {NAMESPACE}\n  labels:\n    team: {'a' * 64}\n", "reject", "metadata", "/metadata/labels/team"),
    Case("configmap-label-key-bad", f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: badlabel\n"
         f"  namespace: {NAMESPACE}\n  labels:\n    'bad key': x\n", "reject", "metadata", "/metadata/labels/bad key"),
    Case("configmap-label-prefix-bad", f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: badprefix\n"
         f"  namespace: {NAMESPACE}\n  labels:\n    Example.COM/team: x\n", "reject", "metadata",
         "/metadata/labels/Example.COM~1team"),
    Case("configmap-annotation-too-big", f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bigannotation\n"
         f"  namespace: {NAMESPACE}\n  annotations:\n    note: {'x' * (256 * 1024)}\n", "reject", "metadata",
         "/metadata/annotations"),
    Case("configmap-annotation-key-bad", f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: badannotation\n"
         f"  namespace: {NAMESPACE}\n  annotations:\n    'a/b/c': x\n", "reject", "metadata",
         "/metadata/annotations/a~1b~1c"),
    Case("secret-valid", f"apiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\n  namespace: {NAMESPACE}\n"
         "type: Opaque\ndata:\n  token: c2VjcmV0\nstringData:\n  user: admin\n", "accept"),
    Case("secret-bad-base64", f"apiVersion: v1\nkind: Secret\nmetadata:\n  name: badb64\n  namespace: {NAMESPACE}\n"
         "data:\n  token: not-base64!\n", "reject", "schema", "/data/token"),
    Case("serviceaccount-valid", f"apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: trainer\n"
         f"  namespace: {NAMESPACE}\nautomountServiceAccountToken: false\n", "accept"),
    Case("serviceaccount-bad-type", f"apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: trainer2\n"
         f"  namespace: {NAMESPACE}\nautomountServiceAccountToken: 'no'\n", "reject", "schema",
         "/automountServiceAccountToken"),
    Case("namespace-valid", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team-ml\n  labels:\n"
         "    pod-security.kubernetes.io/enforce: restricted\n", "accept"),
    Case("namespace-name-dot", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team.ml\n", "reject", "metadata",
         "/metadata/name"),
    # -- Service -------------------------------------------------------------------------------
    Case("service-valid", f"apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  namespace: {NAMESPACE}\nspec:\n"
         "  selector: {app: web}\n  ports:\n    - name: http\n      port: 80\n      targetPort: http\n", "accept"),
    # Kubernetes 1.36 relaxed Service names from DNS-1035 to DNS-1123 labels (a leading digit is fine)
    Case("service-name-digit", f"apiVersion: v1\nkind: Service\nmetadata:\n  name: 1web\n  namespace: {NAMESPACE}\n"
         "spec:\n  ports:\n    - port: 80\n", "accept"),
    Case("service-name-underscore", f"apiVersion: v1\nkind: Service\nmetadata:\n  name: web_1\n"
         f"  namespace: {NAMESPACE}\nspec:\n  ports:\n    - port: 80\n", "reject", "metadata", "/metadata/name"),
    Case("service-port-range", f"apiVersion: v1\nkind: Service\nmetadata:\n  name: web2\n  namespace: {NAMESPACE}\n"
         "spec:\n  ports:\n    - port: 70000\n", "reject", "schema", "/spec/ports/0/port"),
    Case("service-port-int32", f"apiVersion: v1\nkind: Service\nmetadata:\n  name: web3\n  namespace: {NAMESPACE}\n"
         "spec:\n  ports:\n    - port: 3000000000\n", "reject", "schema", "/spec/ports/0/port"),
    Case("service-no-ports", f"apiVersion: v1\nkind: Service\nmetadata:\n  name: web4\n  namespace: {NAMESPACE}\n"
         "spec:\n  selector: {app: web}\n", "reject", "required", "/spec/ports"),
    Case("service-target-port-int-or-string", f"apiVersion: v1\nkind: Service\nmetadata:\n  name: web5\n"
         f"  namespace: {NAMESPACE}\nspec:\n  ports:\n    - port: 80\n      targetPort: 8080\n", "accept"),
    Case("service-target-port-bool", f"apiVersion: v1\nkind: Service\nmetadata:\n  name: web6\n"
         f"  namespace: {NAMESPACE}\nspec:\n  ports:\n    - port: 80\n      targetPort: true\n", "reject", "schema",
         "/spec/ports/0/targetPort"),
    # -- Deployment / Job / Pod ---------------------------------------------------------------------
    Case("deployment-valid", deployment(container="      - name: main\n        image: busybox:1.36\n"
                                        "        resources:\n          requests: {cpu: 100m, memory: 64Mi}\n"
                                        "          limits: {cpu: '1', memory: 1Gi}\n"), "accept"),
    Case("deployment-nulls", deployment("web-nulls", container="      - name: main\n        image: busybox:1.36\n"
                                        "        resources: null\n        env: null\n"), "accept"),
    Case("deployment-replicas-string", deployment("web-a", "").replace("replicas: 2", "replicas: two"), "reject",
         "schema", "/spec/replicas"),
    Case("deployment-unknown-container-field", deployment("web-b", container="      - name: main\n"
                                                          "        image: busybox:1.36\n        imagePullSecret: x\n"),
         "reject", "unknown-field", "/spec/template/spec/containers/0/imagePullSecret"),
    Case("deployment-bad-quantity", deployment("web-c", container="      - name: main\n        image: busybox:1.36\n"
                                               "        resources:\n          limits: {memory: 1GB}\n"),
         "reject", "quantity", "/spec/template/spec/containers/0/resources/limits/memory"),
    Case("deployment-request-over-limit", deployment("web-d", container="      - name: main\n"
                                                     "        image: busybox:1.36\n        resources:\n"
                                                     "          requests: {cpu: '2'}\n          limits: {cpu: '1'}\n"),
         "reject", "quantity", "/spec/template/spec/containers/0/resources/requests/cpu"),
    Case("deployment-selector-mismatch", deployment("web-e", labels="app: other"), "reject", "schema",
         "/spec/template/metadata/labels"),
    Case("deployment-no-image", deployment("web-f", container="      - name: main\n"), "reject", "required",
         "/spec/template/spec/containers/0/image"),
    Case("deployment-container-name-bad", deployment("web-g", container="      - name: Main_1\n"
                                                     "        image: busybox:1.36\n"), "reject", "schema",
         "/spec/template/spec/containers/0/name"),
    Case("deployment-no-selector", deployment("web-h").replace("  selector:\n    matchLabels: {app: web}\n", ""),
         "reject", "required", "/spec/selector"),
    Case("deployment-enum", deployment("web-i", container="      - name: main\n        image: busybox:1.36\n"
                                       "        imagePullPolicy: Sometimes\n"), "reject", "schema",
         "/spec/template/spec/containers/0/imagePullPolicy"),
    Case("deployment-wrong-apiversion", deployment("web-j").replace("apps/v1", "apps/v1beta1"), "reject",
         "unknown-kind"),
    Case("deployment-int-or-string-maxsurge", deployment("web-k", "  strategy:\n    rollingUpdate:\n"
                                                         "      maxSurge: 25%\n      maxUnavailable: 1\n"), "accept"),
    Case("job-valid", f"apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: once\n  namespace: {NAMESPACE}\nspec:\n"
         "  backoffLimit: 2\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n"
         "        - name: main\n          image: busybox:1.36\n", "accept"),
    Case("job-empty-containers", f"apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: empty\n  namespace: {NAMESPACE}\n"
         "spec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers: []\n", "reject", "required",
         "/spec/template/spec/containers"),
    Case("pod-duplicate-container", f"apiVersion: v1\nkind: Pod\nmetadata:\n  name: twins\n  namespace: {NAMESPACE}\n"
         "spec:\n  containers:\n    - name: a\n      image: busybox:1.36\n    - name: a\n      image: busybox:1.36\n",
         "reject", "schema", "/spec/containers/1/name"),
    Case("pod-container-port-range", f"apiVersion: v1\nkind: Pod\nmetadata:\n  name: ports\n  namespace: {NAMESPACE}\n"
         "spec:\n  containers:\n    - name: a\n      image: busybox:1.36\n      ports:\n        - containerPort: 0\n",
         "reject", "schema", "/spec/containers/0/ports/0/containerPort"),
    Case("pod-creation-timestamp-bad", f"apiVersion: v1\nkind: Pod\nmetadata:\n  name: ts\n  namespace: {NAMESPACE}\n"
         "  creationTimestamp: yesterday\nspec:\n  containers:\n    - name: a\n      image: busybox:1.36\n",
         "reject", "schema", "/metadata/creationTimestamp"),
    # -- RBAC / scheduling / policy / admission ---------------------------------------------------
    Case("clusterrole-valid", "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n"
         "  name: trainstack:viewer\nrules:\n  - apiGroups: [trainer.kubeflow.org]\n    resources: [trainjobs]\n"
         "    verbs: [get, list, watch]\n", "accept"),
    Case("clusterrole-name-slash", "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n"
         "  name: a/b\nrules: []\n", "reject", "metadata", "/metadata/name"),
    Case("clusterrole-rules-not-list", "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n"
         "  name: viewer2\nrules: {verbs: [get]}\n", "reject", "schema", "/rules"),
    Case("rolebinding-valid", f"apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: view\n"
         f"  namespace: {NAMESPACE}\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n"
         "  name: view\nsubjects:\n  - kind: ServiceAccount\n    name: trainer\n"
         f"    namespace: {NAMESPACE}\n", "accept"),
    Case("rolebinding-no-roleref", f"apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n"
         f"  name: view2\n  namespace: {NAMESPACE}\nsubjects: []\n", "reject", "required", "/roleRef"),
    Case("rolebinding-subject-kind", f"apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n"
         f"  name: view3\n  namespace: {NAMESPACE}\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n"
         "  kind: ClusterRole\n  name: view\nsubjects:\n  - kind: Robot\n    name: r2\n", "reject", "schema",
         "/subjects/0/kind"),
    Case("priorityclass-valid", "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata:\n"
         "  name: training-low\nvalue: 100\npreemptionPolicy: Never\n", "accept"),
    Case("priorityclass-value-float", "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata:\n"
         "  name: training-bad\nvalue: 1.5\n", "reject", "schema", "/value"),
    Case("pdb-valid", f"apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: trainer\n"
         f"  namespace: {NAMESPACE}\nspec:\n  maxUnavailable: 0\n  selector:\n    matchLabels: {{app: trainer}}\n",
         "accept"),
    Case("pdb-unknown-field", f"apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: trainer2\n"
         f"  namespace: {NAMESPACE}\nspec:\n  maxUnavailable: 0\n  selectors: {{}}\n", "reject", "unknown-field",
         "/spec/selectors"),
    Case("vap-valid", "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata:\n"
         "  name: corpus-vap\nspec:\n  failurePolicy: Fail\n  matchConstraints:\n    resourceRules:\n"
         "      - apiGroups: ['']\n        apiVersions: [v1]\n        operations: [CREATE]\n"
         "        resources: [configmaps]\n  validations:\n    - expression: \"has(object.data)\"\n", "accept"),
    Case("vap-validations-not-list", "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\n"
         "metadata:\n  name: corpus-vap2\nspec:\n  validations: {expression: 'true'}\n", "reject", "schema",
         "/spec/validations"),
    Case("vapb-unknown-field", "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\n"
         "metadata:\n  name: corpus-vapb\nspec:\n  policyName: corpus-vap\n  validationActions: [Deny]\n"
         "  action: Deny\n", "reject", "unknown-field", "/spec/action"),
    # -- a CRD with every structural-schema feature (GADGET_CRD) -------------------------------------
    Case("gadget-valid", gadget(GADGET_VALID), "accept", crd=True),
    Case("gadget-default-satisfies-required", gadget("  size: 1\n"), "accept", crd=True),
    Case("gadget-null-of-non-nullable-is-pruned", gadget("  size: 1\n  turbo: null\n  code: ~\n"), "accept",
         crd=True),
    Case("gadget-required-null", gadget("  size: null\n"), "reject", "required", "/spec/size", crd=True),
    Case("gadget-root-cel", gadget("  size: 1\n", name="x1"), "reject", "cel", "", crd=True),
    Case("gadget-cel-message-expression-field-path", gadget("  size: 5\n  maxSize: 3\n"), "reject", "cel",
         "/spec/size", crd=True),
    Case("gadget-cel-reason-forbidden", gadget("  size: 1\n  mode: slow\n  turbo: false\n"), "reject", "cel",
         "/spec", crd=True),
    Case("gadget-cel-sees-defaults", gadget("  size: 1\n  checked: {value: 2}\n"), "reject", "cel",
         "/spec/checked", crd=True),
    Case("gadget-int32-range", gadget("  size: 3000000000\n"), "reject", "schema", "/spec/size", crd=True),
    Case("gadget-minimum", gadget("  size: -1\n"), "reject", "schema", "/spec/size", crd=True),
    Case("gadget-int-or-string-bool", gadget("  size: 1\n  port: true\n"), "reject", "schema", "/spec/port",
         crd=True),
    Case("gadget-nullable-max-length", gadget("  size: 1\n  note: '12345678901'\n"), "reject", "schema",
         "/spec/note", crd=True),
    Case("gadget-date-time", gadget("  size: 1\n  startAt: yesterday\n"), "reject", "schema", "/spec/startAt",
         crd=True),
    Case("gadget-pattern", gadget("  size: 1\n  code: abc\n"), "reject", "schema", "/spec/code", crd=True),
    Case("gadget-enum", gadget("  size: 1\n  mode: medium\n"), "reject", "schema", "/spec/mode", crd=True),
    Case("gadget-embedded-no-kind", gadget("  size: 1\n  template: {apiVersion: v1, metadata: {name: x}}\n"),
         "reject", "required", "/spec/template/kind", crd=True),
    Case("gadget-embedded-bad-name", gadget("  size: 1\n  template: {apiVersion: v1, kind: ConfigMap, "
                                            "metadata: {name: a/b}}\n"), "reject", "embedded-resource",
         "/spec/template/metadata/name", crd=True),
    Case("gadget-embedded-unknown-metadata-field", gadget("  size: 1\n  template: {apiVersion: v1, kind: ConfigMap, "
                                                          "metadata: {name: a, colour: red}}\n"),
         "reject", "unknown-field", "/spec/template/metadata/colour", crd=True),
    Case("gadget-set-duplicate", gadget("  size: 1\n  tags: [a, a]\n"), "reject", "list-map", "/spec/tags",
         crd=True),
    Case("gadget-map-duplicate", gadget("  size: 1\n  ports: [{name: a, port: 1}, {name: a, port: 2}]\n"),
         "reject", "list-map", "/spec/ports/1", crd=True),
    Case("gadget-unknown-field", gadget("  size: 1\n  colour: red\n"), "reject", "unknown-field", "/spec/colour",
         crd=True),
    Case("gadget-map-value-type", gadget("  size: 1\n  labels: {x: 1}\n"), "reject", "schema", "/spec/labels/x",
         crd=True),
    Case("gadget-preserve-unknown-anything", gadget("  size: 1\n  config: {a: [1, {b: null}], c: true}\n"),
         "accept", crd=True),
    # -- TrainJob ---------------------------------------------------------------------------------
    Case("trainjob-valid", trainjob("  runtimeRef:\n    name: torch-distributed\n  trainer:\n    numNodes: 2\n"
                                    "    resourcesPerNode:\n      limits: {nvidia.com/gpu: 1}\n"), "accept"),
    Case("trainjob-no-runtimeref", trainjob("  trainer:\n    numNodes: 2\n", "tj-a"), "reject", "required",
         "/spec/runtimeRef"),
    Case("trainjob-unknown-field", trainjob("  runtimeRef:\n    name: torch-distributed\n  trainer:\n"
                                            "    numNode: 2\n", "tj-b"), "reject", "unknown-field",
         "/spec/trainer/numNode"),
    Case("trainjob-numnodes-string", trainjob("  runtimeRef:\n    name: torch-distributed\n  trainer:\n"
                                              "    numNodes: two\n", "tj-c"), "reject", "schema",
         "/spec/trainer/numNodes"),
    Case("trainjob-cel-name-dns1035", trainjob(name="1tj"), "reject", "cel", ""),
    Case("trainjob-cel-managedby", trainjob("  runtimeRef:\n    name: torch-distributed\n  managedBy: me/controller\n",
                                            "tj-d"), "reject", "cel", "/spec/managedBy"),
    Case("trainjob-cel-managedby-ok", trainjob("  runtimeRef:\n    name: torch-distributed\n"
                                               "  managedBy: kueue.x-k8s.io/multikueue\n", "tj-e"), "accept"),
    Case("trainjob-cel-storage-uri", trainjob("  runtimeRef:\n    name: torch-distributed\n  initializer:\n"
                                              "    dataset:\n      storageUri: not-a-uri\n", "tj-f"), "reject",
         "cel", "/spec/initializer/dataset/storageUri"),
    Case("trainjob-cel-storage-uri-ok", trainjob("  runtimeRef:\n    name: torch-distributed\n  initializer:\n"
                                                 "    dataset:\n      storageUri: hf://tiny/dataset\n", "tj-g"),
         "accept"),
    Case("trainjob-quantity-int-or-string", trainjob("  runtimeRef:\n    name: torch-distributed\n  trainer:\n"
                                                     "    resourcesPerNode:\n      requests: {cpu: 500m, memory: 1Gi}\n",
                                                     "tj-h"), "accept"),
    Case("trainjob-quantity-bad", trainjob("  runtimeRef:\n    name: torch-distributed\n  trainer:\n"
                                           "    resourcesPerNode:\n      requests: {memory: lots}\n", "tj-i"),
         "reject", "schema", "/spec/trainer/resourcesPerNode/requests/memory"),
    Case("trainjob-null-is-pruned", trainjob("  runtimeRef:\n    name: torch-distributed\n  trainer: null\n"
                                             "  initializer: null\n  suspend: ~\n", "tj-j"), "accept"),
    Case("trainjob-env-list-map-duplicate", trainjob("  runtimeRef:\n    name: torch-distributed\n  trainer:\n"
                                                     "    env:\n      - {name: A, value: '1'}\n"
                                                     "      - {name: A, value: '2'}\n", "tj-k"), "reject", "list-map",
         "/spec/trainer/env/1"),
    Case("trainjob-suspend-string", trainjob("  runtimeRef:\n    name: torch-distributed\n  suspend: 'true'\n", "tj-l"),
         "reject", "schema", "/spec/suspend"),
    # -- TrainingRuntime / ClusterTrainingRuntime ---------------------------------------------------
    Case("clustertrainingruntime-valid", runtime(), "accept"),
    Case("trainingruntime-valid", runtime("TrainingRuntime"), "accept"),
    Case("clustertrainingruntime-cel-one-policy", runtime(ml_policy="    numNodes: 1\n    torch: {}\n    jax: {}\n"),
         "reject", "cel", "/spec/mlPolicy"),
    Case("trainingruntime-cel-one-policy", runtime("TrainingRuntime", ml_policy="    torch: {}\n    mpi: {}\n"),
         "reject", "cel", "/spec/mlPolicy"),
    Case("clustertrainingruntime-cel-depends-on", runtime(
        extra="      startupPolicy:\n        startupPolicyOrder: InOrder\n",
        jobs="        - name: init\n          template:\n            spec:\n              template:\n"
             "                spec:\n                  containers: [{name: init, image: busybox}]\n"
             "        - name: node\n          dependsOn:\n            - {name: init, status: Complete}\n"
             "          template:\n            spec:\n              template:\n                spec:\n"
             "                  containers: [{name: node, image: busybox}]\n"),
         "reject", "cel", "/spec/template/spec"),
    Case("clustertrainingruntime-unknown-field", runtime(ml_policy="    numNodes: 1\n    pytorch: {}\n"), "reject",
         "unknown-field", "/spec/mlPolicy/pytorch"),
    Case("clustertrainingruntime-container-list-map", runtime(
        jobs="        - name: node\n          template:\n            spec:\n              template:\n"
             "                spec:\n                  containers:\n                    - {name: node, image: a}\n"
             "                    - {name: node, image: b}\n"), "reject", "list-map",
         "/spec/template/spec/replicatedJobs/0/template/spec/template/spec/containers/1"),
    Case("trainingruntime-namespaced-without-namespace-ok", runtime("TrainingRuntime").replace(
        f"  namespace: {NAMESPACE}\n", ""), "accept"),
    # -- JobSet ------------------------------------------------------------------------------------
    Case("jobset-valid", jobset(), "accept"),
    Case("jobset-cel-startup-depends", jobset(
        "  startupPolicy:\n    startupPolicyOrder: InOrder\n",
        "    - name: a\n      template:\n        spec:\n          template:\n            spec:\n"
        "              restartPolicy: Never\n              containers: [{name: a, image: busybox}]\n"
        "    - name: b\n      dependsOn: [{name: a, status: Ready}]\n      template:\n        spec:\n"
        "          template:\n            spec:\n              restartPolicy: Never\n"
        "              containers: [{name: b, image: busybox}]\n"), "reject", "cel", "/spec"),
    Case("jobset-replicas-string", jobset(jobs="    - name: workers\n      replicas: many\n      template:\n"
                                          "        spec:\n          template:\n            spec:\n"
                                          "              containers: [{name: main, image: busybox}]\n"),
         "reject", "schema", "/spec/replicatedJobs/0/replicas"),
    Case("jobset-unknown-field", jobset("  suspended: true\n"), "reject", "unknown-field", "/spec/suspended"),
    Case("jobset-enum", jobset("  successPolicy:\n    operator: Most\n"), "reject", "schema",
         "/spec/successPolicy/operator"),
    # -- LeaderWorkerSet ---------------------------------------------------------------------------
    Case("lws-valid", lws(), "accept"),
    Case("lws-no-worker-template", lws("  leaderWorkerTemplate:\n    size: 2\n"), "reject", "required",
         "/spec/leaderWorkerTemplate/workerTemplate"),
    Case("lws-size-string", lws("  leaderWorkerTemplate:\n    size: two\n    workerTemplate:\n      spec:\n"
                                "        containers: [{name: w, image: busybox}]\n"), "reject", "schema",
         "/spec/leaderWorkerTemplate/size"),
    Case("lws-unknown-field", lws("  leaderWorkerTemplate:\n    workers: 2\n    workerTemplate:\n      spec:\n"
                                  "        containers: [{name: w, image: busybox}]\n"), "reject", "unknown-field",
         "/spec/leaderWorkerTemplate/workers"),
    # -- Argo CD ----------------------------------------------------------------------------------
    Case("application-valid", application(), "accept"),
    Case("application-no-project", application("  source:\n    repoURL: https://example.com/repo.git\n"
                                               "  destination:\n    server: https://kubernetes.default.svc\n"),
         "reject", "required", "/spec/project"),
    Case("application-unknown-field", application("  project: default\n  destination: {}\n  sources: []\n"
                                                  "  syncPolicy:\n    auto: true\n"), "reject", "unknown-field",
         "/spec/syncPolicy/auto"),
    Case("application-no-spec", f"apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: nospec\n"
         f"  namespace: {NAMESPACE}\n", "reject", "required", "/spec"),
    Case("applicationset-valid", APPSET, "accept"),
    Case("applicationset-no-generators", APPSET.replace("  generators:\n    - list:\n        elements:\n"
                                                        "          - env: dev\n          - env: prod\n", ""),
         "reject", "required", "/spec/generators"),
    Case("appproject-valid", APPPROJECT, "accept"),
    Case("appproject-bad-type", APPPROJECT.replace("sourceRepos: ['*']", "sourceRepos: '*'"), "reject", "schema",
         "/spec/sourceRepos"),
]


def by_id(case_id: str) -> Case:
    return next(c for c in CASES if c.id == case_id)


def inputs(case: Case, folder: Path) -> tuple[Path, list[str]]:
    """The case's file (and the Gadget CRD when the case needs it) as validate arguments."""
    path = folder / f"{case.id}.{case.suffix}"
    path.write_text(case.text)
    args = [str(path)]
    if case.crd:
        crd = folder / "gadget-crd.yaml"
        crd.write_text(GADGET_CRD)
        args.append(str(crd))
    return path, args
