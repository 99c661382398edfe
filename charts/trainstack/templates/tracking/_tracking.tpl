{{- /*
Experiment tracking (values `tracking`, docs/tracking.md): the names every tracking template and the
golden runtimes share, the namespaces that get an account, and the env the runtimes get.
*/ -}}

{{- /* The server's Deployment, Service and claim; the accounts' Secret in each tracked namespace. */ -}}
{{- define "trainstack.tracking.name" -}}trainstack-tracking{{- end -}}
{{- define "trainstack.tracking.adminSecret" -}}trainstack-tracking-admin{{- end -}}

{{- /*
trainstack.tracking.namespaces
  gives: a JSON list: every team's namespace and `tracking.namespaces`, once each, sorted.
*/ -}}
{{- define "trainstack.tracking.namespaces" -}}
{{- $out := list -}}
{{- range include "trainstack.teams" . | fromJsonArray }}{{ $out = append $out .namespace }}{{ end -}}
{{- $out = concat $out (.Values.tracking.namespaces | default list) | uniq | sortAlpha -}}
{{- toJson $out -}}
{{- end -}}

{{- /*
trainstack.tracking.env
  gives: a JSON list: the env of every golden runtime's `node` container when tracking is on ([] when
         off): the server's URI, the namespace's credential (optional keys: a TrainJob in a namespace
         without the Secret starts, and its script logs nothing), the experiment (the namespace), the
         run name (the TrainJob's name: JobSet names the pods' `jobset-name` label after it), and
         short HTTP retries, so that a server that is down costs a script seconds, not minutes.
*/ -}}
{{- define "trainstack.tracking.env" -}}
{{- $t := .Values.tracking -}}
{{- if $t.enabled -}}
{{- $name := include "trainstack.tracking.name" . -}}
{{- $secret := dict "name" $name "optional" true -}}
{{- toJson (list
    (dict "name" "MLFLOW_TRACKING_URI" "value" (printf "http://%s.%s.svc:%d" $name .Release.Namespace (int $t.port)))
    (dict "name" "MLFLOW_TRACKING_USERNAME" "valueFrom" (dict "secretKeyRef" (merge (dict "key" "username") $secret)))
    (dict "name" "MLFLOW_TRACKING_PASSWORD" "valueFrom" (dict "secretKeyRef" (merge (dict "key" "password") $secret)))
    (dict "name" "MLFLOW_EXPERIMENT_NAME" "valueFrom" (dict "fieldRef" (dict "fieldPath" "metadata.namespace")))
    (dict "name" "MLFLOW_RUN_NAME" "valueFrom" (dict "fieldRef" (dict "fieldPath" "metadata.labels['jobset.sigs.k8s.io/jobset-name']")))
    (dict "name" "MLFLOW_HTTP_REQUEST_MAX_RETRIES" "value" "2")
    (dict "name" "MLFLOW_HTTP_REQUEST_TIMEOUT" "value" "10")) -}}
{{- else -}}
[]
{{- end -}}
{{- end -}}

{{- /* The server pod's labels (the Deployment's selector, the Service's, the NetworkPolicy's). */ -}}
{{- define "trainstack.tracking.selector" -}}
app.kubernetes.io/name: trainstack
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: tracking
{{- end -}}

{{- /*
trainstack.tracking.secretRole and trainstack.tracking.secretRoleBinding
  take: (dict "root" $ "namespace" <ns> "secret" <name>)
  give: a Role in the namespace (create Secrets; get the one named), and its RoleBinding to the
        server's ServiceAccount, after a `---`.
*/ -}}
{{- define "trainstack.tracking.secretRole" -}}
{{- $name := include "trainstack.tracking.name" .root }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ $name }}-accounts
  namespace: {{ .namespace }}
  labels:
    {{- include "trainstack.labels" .root | nindent 4 }}
    app.kubernetes.io/component: tracking
rules:
  - apiGroups: [""]
    resources: [secrets]
    verbs: [create]
  - apiGroups: [""]
    resources: [secrets]
    resourceNames: [{{ .secret }}]
    verbs: [get]
{{- end -}}
{{- define "trainstack.tracking.secretRoleBinding" -}}
{{- $name := include "trainstack.tracking.name" .root }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $name }}-accounts
  namespace: {{ .namespace }}
  labels:
    {{- include "trainstack.labels" .root | nindent 4 }}
    app.kubernetes.io/component: tracking
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ $name }}-accounts
subjects:
  - kind: ServiceAccount
    name: {{ $name }}
    namespace: {{ .root.Release.Namespace }}
{{- end -}}
