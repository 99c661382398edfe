{{- /*
The steps that turn a skeleton in files/runtimes/ into a golden ClusterTrainingRuntime
(runtimes/clustertrainingruntimes.yaml calls them in this order; files/runtimes/README.md has the contract).
Each takes a dict and fills in the runtime object it is given (Helm's dicts are shared, so
`set` on them is the result); none prints anything unless it says so.
*/ -}}

{{- /*
trainstack.runtime.config
  takes: (dict "root" $ "entry" <catalog entry> "rt" <skeleton> "out" <empty dict>)
  gives: out: the runtime's settings: runtimes.defaults, overwritten by its accelerator class
         (runtimes.cpu|nvidia|amd), overwritten by its own key (runtimes.<key>); `env` is the
         tracking env (tracking/_tracking.tpl, when tracking is on) and the three env lists concatenated in
         that order (a later entry of one name wins in the container). On an MPI runtime the tracking
         env is also named in OMPI_MCA_mca_base_env_list: mpirun passes the launcher's environment to
         no rank it starts over ssh except what that list (or `-x`) names, and rank 0 is on a node pod.
*/ -}}
{{- define "trainstack.runtime.config" -}}
{{- $r := .root.Values.runtimes -}}
{{- $own := index $r .entry.key -}}
{{- $cls := index $r .entry.class -}}
{{- $_ := mustMergeOverwrite .out (deepCopy $r.defaults) (deepCopy (omit $cls "env" "enabled")) (deepCopy (omit $own "env" "enabled" "name" "aliases" "image")) -}}
{{- $tracking := include "trainstack.tracking.env" .root | fromJsonArray -}}
{{- $mpi := hasKey (.rt.spec.mlPolicy | default dict) "mpi" -}}
{{- if and $tracking $mpi -}}
{{- $names := list }}{{ range $tracking }}{{ $names = append $names .name }}{{ end -}}
{{- $tracking = append $tracking (dict "name" "OMPI_MCA_mca_base_env_list" "value" (join ";" $names)) -}}
{{- end -}}
{{- $_ := set .out "env" (concat $tracking ($r.defaults.env | default list) ($cls.env | default list) ($own.env | default list)) -}}
{{- end -}}

{{- /*
trainstack.runtime.metadata
  takes: (dict "root" $ "entry" <catalog entry> "rt" <skeleton>)
  gives: rt.metadata: the runtime's name, the skeleton's labels plus trainstack's (accelerator,
         values key, upstream name; the alias it stands for), and its description annotation.
*/ -}}
{{- define "trainstack.runtime.metadata" -}}
{{- $e := .entry -}}
{{- $ann := .rt.metadata.annotations | default dict -}}
{{- $labels := mustMergeOverwrite (dict) (.rt.metadata.labels | default dict) (include "trainstack.labels" .root | fromYaml) (dict "trainstack.io/accelerator" $e.class "trainstack.io/runtime" $e.key "trainstack.io/upstream-runtime" $e.upstream "trainer.kubeflow.org/webhook-validation" "disabled") -}}
{{- $description := index $ann "trainstack.io/description" | default "" -}}
{{- if $e.aliasOf -}}
{{- $_ := set $labels "trainstack.io/alias-of" $e.aliasOf -}}
{{- $description = printf "Another name for %s (runtimes.%s.aliases). %s" $e.aliasOf $e.key $description -}}
{{- end -}}
{{- $_ := set .rt "metadata" (dict "name" $e.name "labels" $labels "annotations" (dict "trainstack.io/description" $description)) -}}
{{- end -}}

{{- /*
trainstack.runtime.policies
  takes: (dict "rt" <runtime> "cfg" <config> "gpu" <bool> "scheduling" <.Values.scheduling>)
  gives: rt.spec.mlPolicy.numNodes (and MPI's processes per node on GPUs), the gang-scheduling
         podGroupPolicy (coscheduling or volcano; native and none need none), and the Kueue queue
         label on the JobSet template.
*/ -}}
{{- define "trainstack.runtime.policies" -}}
{{- $cfg := .cfg -}}
{{- $ml := .rt.spec.mlPolicy -}}
{{- $_ := set $ml "numNodes" (int $cfg.numNodes) -}}
{{- if and .gpu (hasKey $ml "mpi") }}{{ $_ := set $ml.mpi "numProcPerNode" (int $cfg.gpusPerNode) }}{{ end -}}
{{- if eq .scheduling.gang "coscheduling" -}}
{{- $_ := set .rt.spec "podGroupPolicy" (dict "coscheduling" (dict "scheduleTimeoutSeconds" (int .scheduling.scheduleTimeoutSeconds))) -}}
{{- else if eq .scheduling.gang "volcano" -}}
{{- $_ := set .rt.spec "podGroupPolicy" (dict "volcano" dict) -}}
{{- end -}}
{{- if $cfg.queueName -}}
{{- $_ := set .rt.spec.template "metadata" (dict "labels" (dict "kueue.x-k8s.io/queue-name" $cfg.queueName)) -}}
{{- end -}}
{{- end -}}

{{- /*
trainstack.runtime.volumeClaims
  takes: (dict "rt" <runtime> "cfg" <config>)
  gives: rt.spec.template.spec.volumeClaimPolicies: the skeleton's `initializer` claim sized from
         initializerStorage, then a per-job `output` claim (kept when the TrainJob is deleted)
         when output is on without an existingClaim.
*/ -}}
{{- define "trainstack.runtime.volumeClaims" -}}
{{- $cfg := .cfg -}}
{{- $tpl := .rt.spec.template -}}
{{- $claimPolicies := $tpl.spec.volumeClaimPolicies | default list -}}
{{- range $policy := $claimPolicies -}}
{{- range $claim := $policy.templates -}}
{{- if eq $claim.metadata.name "initializer" -}}
{{- $storage := $cfg.initializerStorage -}}
{{- $_ := set $claim "spec" (dict "accessModes" $storage.accessModes "resources" (dict "requests" (dict "storage" $storage.size))) -}}
{{- if $storage.storageClassName }}{{ $_ := set $claim.spec "storageClassName" $storage.storageClassName }}{{ end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and $cfg.output.enabled (not $cfg.output.existingClaim) -}}
{{- $claim := dict "metadata" (dict "name" "output") "spec" (dict "accessModes" $cfg.output.accessModes "resources" (dict "requests" (dict "storage" $cfg.output.size))) -}}
{{- if $cfg.output.storageClassName }}{{ $_ := set $claim.spec "storageClassName" $cfg.output.storageClassName }}{{ end -}}
{{- $claimPolicies = append $claimPolicies (dict "templates" (list $claim) "retentionPolicy" (dict "whenDeleted" "Retain")) -}}
{{- end -}}
{{- if $claimPolicies }}{{ $_ := set $tpl.spec "volumeClaimPolicies" $claimPolicies }}{{ end -}}
{{- end -}}

{{- /*
trainstack.runtime.pod
  takes: (dict "root" $ "pod" <pod spec of one replicated job> "cfg" <config> "gpu" <bool>)
  gives: the pod's securityContext (values under the skeleton's), pull secrets, priority class,
         placement (nodeSelector, tolerations, affinity), the GPU runtimeClassName, and, in pods
         with a `node` container, the spread over nodes (`spread`), /dev/shm (GPUs) and the output volume;
         every pod tolerates a lost node for `nodeLostSeconds`.
*/ -}}
{{- define "trainstack.runtime.pod" -}}
{{- $cfg := .cfg -}}
{{- $pod := .pod -}}
{{- $_ := set $pod "securityContext" (mustMergeOverwrite (deepCopy $cfg.podSecurityContext) ($pod.securityContext | default dict)) -}}
{{- $secrets := concat (.root.Values.global.imagePullSecrets | default list) ($cfg.imagePullSecrets | default list) -}}
{{- if $secrets }}{{ $_ := set $pod "imagePullSecrets" $secrets }}{{ end -}}
{{- if $cfg.priorityClassName }}{{ $_ := set $pod "priorityClassName" $cfg.priorityClassName }}{{ end -}}
{{- if $cfg.nodeSelector }}{{ $_ := set $pod "nodeSelector" $cfg.nodeSelector }}{{ end -}}
{{- if $cfg.tolerations }}{{ $_ := set $pod "tolerations" $cfg.tolerations }}{{ end -}}
{{- if $cfg.affinity }}{{ $_ := set $pod "affinity" $cfg.affinity }}{{ end -}}
{{- if not (kindIs "invalid" $cfg.nodeLostSeconds) -}}
{{- /* evicted this long after its node goes NotReady or unreachable (Kubernetes' default: 300 s) */ -}}
{{- $lost := list -}}
{{- range $key := list "node.kubernetes.io/not-ready" "node.kubernetes.io/unreachable" -}}
{{- $lost = append $lost (dict "key" $key "operator" "Exists" "effect" "NoExecute" "tolerationSeconds" (int64 $cfg.nodeLostSeconds)) -}}
{{- end -}}
{{- $_ := set $pod "tolerations" (concat ($pod.tolerations | default list) $lost) -}}
{{- end -}}
{{- if and .gpu $cfg.runtimeClassName }}{{ $_ := set $pod "runtimeClassName" $cfg.runtimeClassName }}{{ end -}}
{{- $volumes := $pod.volumes | default list -}}
{{- $nodePod := false -}}
{{- range $c := $pod.containers }}{{ if eq $c.name "node" }}{{ $nodePod = true }}{{ end }}{{ end -}}
{{- if and $nodePod (ne ($cfg.spread | default "none") "none") -}}
{{- /* a job's own pods (any JobSet pod, matchLabelKeys: of this JobSet) one per node where nodes allow; the
       API server refuses a key in both the selector and matchLabelKeys */ -}}
{{- $spread := dict "maxSkew" 1 "topologyKey" "kubernetes.io/hostname" "nodeTaintsPolicy" "Honor"
      "whenUnsatisfiable" (ternary "DoNotSchedule" "ScheduleAnyway" (eq $cfg.spread "required"))
      "labelSelector" (dict "matchExpressions" (list (dict "key" "jobset.sigs.k8s.io/replicatedjob-name" "operator" "Exists")))
      "matchLabelKeys" (list "jobset.sigs.k8s.io/jobset-name") -}}
{{- $_ := set $pod "topologySpreadConstraints" (append ($pod.topologySpreadConstraints | default list) $spread) -}}
{{- end -}}
{{- if and $nodePod .gpu $cfg.shm.enabled -}}
{{- $volumes = append $volumes (dict "name" "dshm" "emptyDir" (dict "medium" "Memory" "sizeLimit" $cfg.shm.sizeLimit)) -}}
{{- end -}}
{{- if and $nodePod $cfg.output.enabled $cfg.output.existingClaim -}}
{{- $volumes = append $volumes (dict "name" "output" "persistentVolumeClaim" (dict "claimName" $cfg.output.existingClaim)) -}}
{{- end -}}
{{- if $volumes }}{{ $_ := set $pod "volumes" $volumes }}{{ end -}}
{{- end -}}

{{- /*
trainstack.runtime.image
  takes: (dict "root" $ "ref" "@<key under images>" "where" "<file>: container <name>[, env <name>]")
  gives: prints the image reference (registry/repository:tag@digest, through the mirror); fails the
         render naming `where` and the key when images has no such key.
*/ -}}
{{- define "trainstack.runtime.image" -}}
{{- $image := index .root.Values.images (trimPrefix "@" .ref) -}}
{{- if not $image }}{{ fail (printf "%s uses image key %q, which is not under images in values" .where .ref) }}{{ end -}}
{{- include "trainstack.image" (list $image .root) -}}
{{- end -}}

{{- /*
trainstack.runtime.container
  takes: (dict "root" $ "c" <container> "cfg" <config> "gpu" <bool> "path" <skeleton file>
               "defaultImage" "@<key>")
  gives: the container's image (its own `@key`, else the runtime's) and `@key` env values resolved,
         its securityContext (values under the skeleton's); the `node` container gets the
         resources (plus the GPU limit), the env from values before its own, and the /dev/shm and
         output mounts; any other container (an initializer) gets initializerResources.
*/ -}}
{{- define "trainstack.runtime.container" -}}
{{- $c := .c -}}
{{- $cfg := .cfg -}}
{{- $where := printf "%s: container %s" .path $c.name -}}
{{- $ref := $c.image | default .defaultImage -}}
{{- if hasPrefix "@" $ref }}{{ $_ := set $c "image" (include "trainstack.runtime.image" (dict "root" .root "ref" $ref "where" $where)) }}{{ end -}}
{{- range $e := $c.env | default list -}}
{{- if and $e.value (hasPrefix "@" (toString $e.value)) -}}
{{- $_ := set $e "value" (include "trainstack.runtime.image" (dict "root" $.root "ref" $e.value "where" (printf "%s, env %s" $where $e.name))) -}}
{{- end -}}
{{- end -}}
{{- $_ := set $c "securityContext" (mustMergeOverwrite (deepCopy $cfg.securityContext) ($c.securityContext | default dict)) -}}
{{- if eq $c.name "node" -}}
{{- $res := deepCopy $cfg.resources -}}
{{- if .gpu -}}
{{- $limits := $res.limits | default dict -}}
{{- $_ := set $limits $cfg.resourceName (int $cfg.gpusPerNode) -}}
{{- $_ := set $res "limits" $limits -}}
{{- end -}}
{{- $_ := set $c "resources" $res -}}
{{- $_ := set $c "env" (concat $cfg.env ($c.env | default list)) -}}
{{- $mounts := list -}}
{{- if and .gpu $cfg.shm.enabled }}{{ $mounts = append $mounts (dict "name" "dshm" "mountPath" "/dev/shm") }}{{ end -}}
{{- if $cfg.output.enabled }}{{ $mounts = append $mounts (dict "name" "output" "mountPath" $cfg.output.mountPath) }}{{ end -}}
{{- if $mounts }}{{ $_ := set $c "volumeMounts" (concat ($c.volumeMounts | default list) $mounts) }}{{ end -}}
{{- else -}}
{{- $_ := set $c "resources" (deepCopy $cfg.initializerResources) -}}
{{- end -}}
{{- end -}}
