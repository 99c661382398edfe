{{- /*
`helm test`: files/platform-test/check.py in a pod, with what to check in spec.json (the golden
runtimes this release renders, a TrainJob the platform must admit and, with the imageTag rule on, one
its policy must answer). Every object is a test hook: none exists before `helm test`; the RBAC and
ConfigMap go when the test passes, the pod stays for `helm test --logs` until the next run.
*/ -}}
{{- /*
trainstack.platformTest.spec
  takes: the root context
  gives: spec.json's content as JSON (the runtimes, the TrainJob admitted and the one refused);
         fails on a tests.runtime that is not a golden CPU runtime of this release.
*/ -}}
{{- define "trainstack.platformTest.spec" -}}
{{- $catalog := include "trainstack.runtimeCatalog" . | fromJsonArray }}
{{- $names := list }}{{ $cpu := list }}
{{- range $catalog }}{{ $names = append $names .name }}{{ if eq .class "cpu" }}{{ $cpu = append $cpu .name }}{{ end }}{{ end }}
{{- $runtime := .Values.tests.runtime | default (first $cpu) }}
{{- if not $runtime }}
{{- fail "tests.enabled: no golden CPU runtime is enabled for the test's TrainJob; set tests.runtime or tests.enabled=false" }}
{{- end }}
{{- if not (has $runtime $names) }}
{{- fail (printf "tests.runtime: %s is not a golden runtime of this release (%s)" $runtime (join ", " $names)) }}
{{- end }}
{{- $name := include "trainstack.platformTest.name" . }}
{{- $p := .Values.policies }}
{{- $labels := dict "trainstack.io/platform-test" "true" }}
{{- if and $p.enabled $p.rules.requiredLabels.enabled }}
{{- range $p.params.requiredLabels }}{{ $_ := set $labels . "platform-test" }}{{ end }}
{{- end }}
{{- $admitted := dict "apiVersion" "trainer.kubeflow.org/v1alpha1" "kind" "TrainJob"
    "metadata" (dict "name" $name "namespace" .Release.Namespace "labels" $labels)
    "spec" (dict "runtimeRef" (dict "name" $runtime)) }}
{{- $spec := dict "runtimes" $names "admitted" $admitted }}
{{- $rule := $p.rules.imageTag }}
{{- if and $p.enabled $rule.enabled }}
{{- $actions := $rule.validationActions | default $p.validationActions }}
{{- if or (has "Deny" $actions) (has "Warn" $actions) }}
{{- $latest := printf "%s/%s:latest" (.Values.global.imageRegistry | default .Values.images.python.registry) .Values.images.python.repository }}
{{- $refused := deepCopy $admitted }}
{{- $_ := set $refused.spec "trainer" (dict "image" $latest) }}
{{- $_ := set $spec "refused" $refused }}
{{- $_ := set $spec "refusedBy" "trainstack-image-tag" }}
{{- $_ := set $spec "deny" (has "Deny" $actions) }}
{{- end }}
{{- end }}
{{- toJson $spec }}
{{- end }}
{{- define "trainstack.platformTest.name" -}}
{{- printf "%s-platform-test" .Release.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
