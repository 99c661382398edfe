{{- /*
Quotas with Kueue (teams.kueue.enabled): one ResourceFlavor per node pool, derived from the
accelerator classes of the golden runtimes ("trainstack.flavors"); a ClusterQueue per team in
one cohort, with the team's quota as nominal quota and its borrowingLimit; the team's
LocalQueue (named after the team) in its namespace.

CPU and memory of every job count on the cpu flavor; each GPU class has its own resource group
with its extended resource on its flavor. So a GPU pod gets the cpu flavor's node labels too,
which must therefore be empty (runtimes.cpu.nodeSelector unset). The GPU flavors carry the
same tolerations as the GPU runtimes: Kueue versions that replace a runtime's tolerations with
the flavor's (kueue#15161) then still leave the pods their GPU toleration.

With teams.kueue.topologyAware, every flavor is a topology flavor of one Topology whose only level
is the node (kubernetes.io/hostname), and a ClusterQueue has one resource group covering CPU,
memory and every GPU resource, with a flavor per node pool: Kueue (whose TAS then applies to every
job of the queue, "implied") admits a job only when each of its pods fits on a concrete node, and
binds the pods there. A PodSet gets one topology flavor (Kueue allows no more), so the team's CPU
and memory quota apply on each pool, and each flavor needs the node labels of its pool.
*/ -}}
{{- /*
With kueue.install on a cluster that has no Kueue API yet (the first `helm install`), Helm could
not map these kinds (Kueue's chart ships its CRDs as templates, created in the same release), and
Kueue's webhooks, which fail closed, would not serve yet: the objects are then a post-install hook,
created after the release's objects are up (and, with --wait, ready). They carry the release's
ownership annotations, so the next `helm upgrade`, which renders them as plain objects once the
API exists, adopts them into the release.
*/ -}}
{{- define "trainstack.kueueFirstInstall" -}}
{{- if and .Values.kueue.install (not (.Capabilities.APIVersions.Has "kueue.x-k8s.io/v1beta2/ClusterQueue")) -}}
helm.sh/hook: post-install
meta.helm.sh/release-name: {{ .Release.Name }}
meta.helm.sh/release-namespace: {{ .Release.Namespace }}
{{- end }}
{{- end }}
