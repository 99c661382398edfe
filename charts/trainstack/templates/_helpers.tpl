{{/* Labels on every object trainstack itself renders. */}}
{{- define "trainstack.labels" -}}
app.kubernetes.io/name: trainstack
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: trainstack
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/*
An image reference from an `images` entry ({registry, repository, tag, digest}), with the
registry replaced by global.imageRegistry when a mirror is set.
Usage: include "trainstack.image" (list $image $)
*/}}
{{- define "trainstack.image" -}}
{{- $image := index . 0 -}}
{{- $root := index . 1 -}}
{{- $registry := $root.Values.global.imageRegistry | default $image.registry -}}
{{- $ref := printf "%s/%s:%s" $registry $image.repository $image.tag -}}
{{- if $image.digest -}}{{- $ref = printf "%s@%s" $ref $image.digest -}}{{- end -}}
{{- $ref -}}
{{- end -}}

{{/*
The enabled golden runtimes, as a JSON list of {path, key, class, name}: one place decides
which runtimes exist (runtimes.yaml renders them, the policy params list them).
*/}}
{{- define "trainstack.runtimeCatalog" -}}
{{- $out := list -}}
{{- range $path, $_ := .Files.Glob "runtimes/*.yaml" -}}
{{- $rt := $.Files.Get $path | fromYaml -}}
{{- $ann := $rt.metadata.annotations | default dict -}}
{{- $key := index $ann "trainstack.io/values-key" | default "" -}}
{{- $class := index $ann "trainstack.io/accelerator" | default "" -}}
{{- if not (hasKey $.Values.runtimes $key) -}}
{{- fail (printf "%s: annotation trainstack.io/values-key is %q but values have no runtimes.%s" $path $key $key) -}}
{{- end -}}
{{- if not (has $class (list "cpu" "nvidia" "amd")) -}}
{{- fail (printf "%s: annotation trainstack.io/accelerator must be cpu, nvidia or amd, not %q" $path $class) -}}
{{- end -}}
{{- $own := index $.Values.runtimes $key -}}
{{- $on := $own.enabled -}}
{{- if and (eq (index $ann "trainstack.io/requires" | default "") "dataCache") (not $.Values.dataCache.enabled) -}}{{- $on = false -}}{{- end -}}
{{- if $on -}}
{{- $out = append $out (dict "path" $path "key" $key "class" $class "name" ($own.name | default $rt.metadata.name)) -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}
