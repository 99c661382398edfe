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
The enabled golden runtimes, as a JSON list of {path, key, class, name, upstream, aliasOf}: one
place decides which runtimes exist (runtimes/clustertrainingruntimes.yaml renders them, the policy params list them).
Naming rule: each skeleton in files/runtimes/ is one upstream runtime under upstream's name, on the
accelerator class of its `trainstack.io/accelerator` annotation; each `key=class` pair of
`trainstack.io/variants` is the same skeleton on another class, named <upstream name>-<suffix>
(cpu: -cpu, nvidia: -gpu, amd: -rocm). `runtimes.<key>.aliases` are further names for one runtime.
*/}}
{{- define "trainstack.runtimeCatalog" -}}
{{- $out := list -}}
{{- $suffix := dict "cpu" "cpu" "nvidia" "gpu" "amd" "rocm" -}}
{{- range $path, $_ := .Files.Glob "files/runtimes/*.yaml" -}}
{{- $rt := $.Files.Get $path | fromYaml -}}
{{- $ann := $rt.metadata.annotations | default dict -}}
{{- $upstream := $rt.metadata.name -}}
{{- $members := list (dict "key" (index $ann "trainstack.io/values-key" | default "") "class" (index $ann "trainstack.io/accelerator" | default "") "name" $upstream) -}}
{{- range $variant := splitList "," (index $ann "trainstack.io/variants" | default "") -}}
{{- if trim $variant -}}
{{- $pair := splitList "=" (trim $variant) -}}
{{- $members = append $members (dict "key" (first $pair) "class" (last $pair) "name" (printf "%s-%s" $upstream (get $suffix (last $pair) | default (last $pair)))) -}}
{{- end -}}
{{- end -}}
{{- $fixedName := eq (index ($rt.metadata.labels | default dict) "trainer.kubeflow.org/framework" | default "") "torchtune" -}}
{{- range $m := $members -}}
{{- if not (hasKey $.Values.runtimes $m.key) -}}
{{- fail (printf "%s: annotation trainstack.io/values-key or trainstack.io/variants names %q but values have no runtimes.%s" $path $m.key $m.key) -}}
{{- end -}}
{{- if not (has $m.class (list "cpu" "nvidia" "amd")) -}}
{{- fail (printf "%s: accelerator of runtimes.%s must be cpu, nvidia or amd, not %q" $path $m.key $m.class) -}}
{{- end -}}
{{- $own := index $.Values.runtimes $m.key -}}
{{- $cls := index $.Values.runtimes $m.class -}}
{{- $on := and $own.enabled (or (not (hasKey $cls "enabled")) $cls.enabled) -}}
{{- if and (eq (index $ann "trainstack.io/requires" | default "") "dataCache") (not $.Values.dataCache.enabled) -}}{{- $on = false -}}{{- end -}}
{{- $name := $own.name | default $m.name -}}
{{- if and $fixedName (ne $name $m.name) -}}
{{- fail (printf "runtimes.%s.name: %s keeps upstream's name %q (the Trainer controller reads the model from it); remove the name" $m.key $m.name $m.name) -}}
{{- end -}}
{{- if $on -}}
{{- $out = append $out (dict "path" $path "key" $m.key "class" $m.class "name" $name "upstream" $upstream "aliasOf" "") -}}
{{- range $alias := $own.aliases | default list -}}
{{- $out = append $out (dict "path" $path "key" $m.key "class" $m.class "name" $alias "upstream" $upstream "aliasOf" $name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}
