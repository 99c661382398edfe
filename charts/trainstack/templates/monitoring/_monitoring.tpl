{{/*
The controllers whose /metrics trainstack wires up, as a JSON list of
{name, selector, ports (the other container ports their NetworkPolicy keeps open to all), auth}.
`auth` says what guards /metrics in the pinned binary (see docs/operations.md):
  - trainer v2.3.0: HTTPS, no authentication filter (controller-runtime's FilterProvider is not
    set in pkg/config/config.go), so only the NetworkPolicy restricts it;
  - jobset v0.12.0, lws v0.8.0: HTTPS with filters.WithAuthenticationAndAuthorization (main.go,
    cmd/main.go), and kueue v0.19.2 (cmd/kueue/main.go): a token allowed `get` on `/metrics`.
Kueue (with `kueue.install`) also keeps its visibility API server port (8082) open.
Selectors are the upstream charts' pod labels without the instance label.
*/}}
{{- define "trainstack.metricsTargets" -}}
{{- $out := list -}}
{{- /* the status server (10443): from anywhere, unless team isolation admits only the teams to it (templates/teams/) */ -}}
{{- $trainerPorts := ternary (list 9443 8081) (list 9443 8081 10443) (eq (include "trainstack.teams.isolated" .) "true") -}}
{{- $out = append $out (dict "name" "trainer" "auth" "networkPolicy" "ports" $trainerPorts
    "selector" (dict "app.kubernetes.io/name" "kubeflow-trainer" "app.kubernetes.io/component" "manager" "app.kubernetes.io/instance" .Release.Name)) -}}
{{- if .Values.jobset.install -}}
{{- $out = append $out (dict "name" "jobset" "auth" "tokenReview" "ports" (list 9443 8081)
    "selector" (dict "app.kubernetes.io/name" "jobset" "app.kubernetes.io/component" "controller" "app.kubernetes.io/instance" .Release.Name)) -}}
{{- end -}}
{{- $lws := .Values.dataCache.enabled -}}
{{- if hasKey .Values.lws "enabled" -}}{{- $lws = .Values.lws.enabled -}}{{- end -}}
{{- if $lws -}}
{{- $out = append $out (dict "name" "lws" "auth" "tokenReview" "ports" (list 9443 8081)
    "selector" (dict "app.kubernetes.io/name" "lws" "control-plane" "controller-manager" "app.kubernetes.io/instance" .Release.Name)) -}}
{{- end -}}
{{- if and (hasKey .Values "kueue") .Values.kueue.install -}}
{{- $out = append $out (dict "name" "kueue" "auth" "tokenReview" "ports" (list 9443 8081 8082)
    "selector" (dict "app.kubernetes.io/name" "kueue" "control-plane" "controller-manager" "app.kubernetes.io/instance" .Release.Name)) -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* "true" when the ServiceMonitors and the PrometheusRule are rendered. */}}
{{- define "trainstack.prometheusOperator" -}}
{{- $m := .Values.monitoring -}}
{{- if and $m.enabled (or (eq $m.prometheusOperator "always") (and (eq $m.prometheusOperator "auto") (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1/ServiceMonitor"))) -}}
true
{{- end -}}
{{- end -}}

{{/* Labels of the ServiceMonitors and the PrometheusRule: trainstack's plus monitoring.labels. */}}
{{- define "trainstack.monitoringLabels" -}}
{{ include "trainstack.labels" . }}
{{- with .Values.monitoring.labels }}
{{ toYaml . }}
{{- end }}
{{- end -}}
