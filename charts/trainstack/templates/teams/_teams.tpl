{{/*
Teams: every key of `teams` except `defaults` and `kueue` is one team. "trainstack.teams"
checks every entry and returns them as a JSON list, normalised, so each template reads teams
from one place:
  {name, namespace, members: [{kind, name, namespace, role}], quota: {res: "q"},
   borrowingLimit: {res: "q"}, runtimes: [names], ownRuntimes, dataCache}
A bad entry fails the render with one line naming the team and the field.
*/}}
{{- define "trainstack.teamReserved" -}}["defaults","kueue"]{{- end -}}

{{- define "trainstack.quantityPattern" -}}^([0-9]+(\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?${{- end -}}
{{- define "trainstack.resourceNamePattern" -}}^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[a-z0-9A-Z]([-a-z0-9A-Z_.]*[a-z0-9A-Z])?${{- end -}}

{{- define "trainstack.teams" -}}
{{- $reserved := include "trainstack.teamReserved" . | fromJsonArray -}}
{{- $defaults := .Values.teams.defaults | default dict -}}
{{- $golden := list -}}
{{- range include "trainstack.runtimeCatalog" . | fromJsonArray }}{{ $golden = append $golden .name }}{{ end -}}
{{- $golden = concat $golden (.Values.policies.params.extraRuntimes | default list) | uniq | sortAlpha -}}
{{- $qty := include "trainstack.quantityPattern" . -}}
{{- $resName := include "trainstack.resourceNamePattern" . -}}
{{- $dns := "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" -}}
{{- $subdomain := "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$" -}}
{{- $namespaces := dict -}}
{{- $out := list -}}
{{- range $name := keys .Values.teams | sortAlpha -}}
{{- if not (has $name $reserved) -}}
{{- $t := index $.Values.teams $name | default dict -}}
{{- $where := printf "teams.%s" $name -}}
{{- if or (not (regexMatch $dns $name)) (gt (len $name) 63) -}}
{{- fail (printf "%s: the team name %q must be a DNS label (lower-case letters, digits and '-', at most 63 characters)" $where $name) -}}
{{- end -}}
{{- $ns := $t.namespace | default $name -}}
{{- if or (not (regexMatch $dns $ns)) (gt (len $ns) 63) -}}
{{- fail (printf "%s.namespace: %q is not a valid namespace name (a DNS label)" $where $ns) -}}
{{- end -}}
{{- if or (eq $ns $.Release.Namespace) (hasPrefix "kube-" $ns) (eq $ns "default") -}}
{{- fail (printf "%s.namespace: %q is a system namespace; give the team its own" $where $ns) -}}
{{- end -}}
{{- if hasKey $namespaces $ns -}}
{{- fail (printf "%s.namespace: %q is already the namespace of team %s; every team needs its own namespace" $where $ns (get $namespaces $ns)) -}}
{{- end -}}
{{- $_ := set $namespaces $ns $name -}}
{{- /* members */ -}}
{{- $members := list -}}
{{- range $i, $m := $t.members | default list -}}
{{- $at := printf "%s.members[%d]" $where $i -}}
{{- $kind := $m.kind | default "User" -}}
{{- $mname := toString ($m.name | default "") -}}
{{- if not (has $kind (list "User" "Group" "ServiceAccount")) -}}
{{- fail (printf "%s.kind: %q is not a subject kind; use User, Group or ServiceAccount" $at $kind) -}}
{{- end -}}
{{- $role := $m.role | default "edit" -}}
{{- if not (has $role (list "admin" "edit" "view")) -}}
{{- fail (printf "%s.role: %q is not a team role; use admin, edit or view" $at $role) -}}
{{- end -}}
{{- $member := dict "kind" $kind "name" $mname "role" $role -}}
{{- if eq $kind "ServiceAccount" -}}
{{- $sans := $m.namespace | default $ns -}}
{{- if or (not (regexMatch $subdomain $mname)) (gt (len $mname) 253) -}}
{{- fail (printf "%s.name: %q is not a valid ServiceAccount name (a DNS subdomain)" $at $mname) -}}
{{- end -}}
{{- if not (regexMatch $dns $sans) -}}
{{- fail (printf "%s.namespace: %q is not a valid namespace name" $at $sans) -}}
{{- end -}}
{{- $_ := set $member "namespace" $sans -}}
{{- else -}}
{{- if or (eq $mname "") (regexMatch "\\s" $mname) -}}
{{- fail (printf "%s.name: %q is not a valid %s subject: a name without spaces is needed" $at $mname $kind) -}}
{{- end -}}
{{- if hasPrefix "system:" $mname -}}
{{- fail (printf "%s.name: %q is not a valid %s subject for a team: system: names belong to Kubernetes (system:authenticated would give every user the team's access)" $at $mname $kind) -}}
{{- end -}}
{{- end -}}
{{- $members = append $members $member -}}
{{- end -}}
{{- /* quota and borrowing */ -}}
{{- $quota := dict -}}
{{- range $res, $q := $t.quota | default dict -}}
{{- if not (regexMatch $resName $res) -}}
{{- fail (printf "%s.quota: %q is not a resource name" $where $res) -}}
{{- end -}}
{{- if not (regexMatch $qty (toString $q)) -}}
{{- fail (printf "%s.quota.%s: %q is not a Kubernetes quantity (for example 8, 500m, 64Gi)" $where $res (toString $q)) -}}
{{- end -}}
{{- $_ := set $quota $res (toString $q) -}}
{{- end -}}
{{- $borrow := dict -}}
{{- range $res, $q := $t.borrowingLimit | default dict -}}
{{- if not (regexMatch $qty (toString $q)) -}}
{{- fail (printf "%s.borrowingLimit.%s: %q is not a Kubernetes quantity (for example 2, 500m, 64Gi)" $where $res (toString $q)) -}}
{{- end -}}
{{- if not (hasKey $quota $res) -}}
{{- fail (printf "%s.borrowingLimit.%s: the team has no quota.%s to borrow beyond" $where $res $res) -}}
{{- end -}}
{{- $_ := set $borrow $res (toString $q) -}}
{{- end -}}
{{- /* runtimes */ -}}
{{- $runtimes := $t.runtimes | default ($defaults.runtimes | default list) -}}
{{- range $runtimes -}}
{{- if not (has . $golden) -}}
{{- fail (printf "%s.runtimes: %q is not a runtime this environment installs; use one of: %s" $where . (join ", " $golden)) -}}
{{- end -}}
{{- end -}}
{{- if not $runtimes }}{{ $runtimes = $golden }}{{ end -}}
{{- $own := $defaults.ownRuntimes | default false -}}
{{- if hasKey $t "ownRuntimes" }}{{ $own = $t.ownRuntimes }}{{ end -}}
{{- $cache := $.Values.dataCache.enabled -}}
{{- if hasKey $t "dataCache" }}{{ $cache = and $t.dataCache $.Values.dataCache.enabled }}{{ end -}}
{{- $out = append $out (dict "name" $name "namespace" $ns "members" $members "quota" $quota "borrowingLimit" $borrow
      "runtimes" (sortAlpha $runtimes) "ownRuntimes" $own "dataCache" $cache) -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/*
Sum of two quantities for the ResourceQuota of a team that may borrow: integers, or the same
suffix on both (64Gi + 32Gi). Usage: include "trainstack.quantitySum" (list "a" "b" "where")
*/}}
{{- define "trainstack.quantitySum" -}}
{{- $a := index . 0 -}}{{- $b := index . 1 -}}{{- $where := index . 2 -}}
{{- $ra := regexFind "[^0-9]+$" $a -}}{{- $rb := regexFind "[^0-9]+$" $b -}}
{{- if or (ne $ra $rb) (not (regexMatch "^[0-9]+[A-Za-z]*$" $a)) (not (regexMatch "^[0-9]+[A-Za-z]*$" $b)) -}}
{{- fail (printf "%s: write the quota and borrowingLimit as whole numbers with the same unit (%q and %q), so the namespace ResourceQuota can hold both" $where $a $b) -}}
{{- end -}}
{{- printf "%d%s" (add (trimSuffix $ra $a | atoi) (trimSuffix $rb $b | atoi)) $ra -}}
{{- end -}}

{{/*
The Kueue ResourceFlavors: one per accelerator class of the enabled golden runtimes, with the
node labels and tolerations those runtimes select and tolerate (runtimes.defaults, then the
class), so there is no second copy of them. The cpu flavor is always there: CPU and memory of
every job are counted on it. JSON list of {class, name, nodeLabels, tolerations,
resourceName}.
*/}}
{{- /* The Kueue Topology of teams.kueue.topologyAware: one level, the node. */ -}}
{{- define "trainstack.kueueTopology" -}}trainstack-nodes{{- end -}}

{{- define "trainstack.flavors" -}}
{{- $classes := list -}}
{{- range include "trainstack.runtimeCatalog" . | fromJsonArray }}{{ $classes = append $classes .class }}{{ end -}}
{{- $out := list -}}
{{- range $class := list "cpu" "nvidia" "amd" -}}
{{- if or (eq $class "cpu") (has $class $classes) -}}
{{- $cls := index $.Values.runtimes $class -}}
{{- $labels := mustMergeOverwrite (dict) (deepCopy ($.Values.runtimes.defaults.nodeSelector | default dict)) (deepCopy ($cls.nodeSelector | default dict)) -}}
{{- $tolerations := $cls.tolerations | default ($.Values.runtimes.defaults.tolerations | default list) -}}
{{- $out = append $out (dict "class" $class "name" (printf "trainstack-%s" $class) "nodeLabels" $labels "tolerations" $tolerations "resourceName" ($cls.resourceName | default "")) -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{- /*
Team isolation (templates/teams/networkpolicy.yaml): "true" when every team namespace gets its
NetworkPolicy and the Trainer's status server (10443) admits only the team namespaces: there are
teams and `teams.defaults.networkPolicy.enabled`.
*/ -}}
{{- define "trainstack.teams.isolated" -}}
{{- if and .Values.teams.defaults.networkPolicy.enabled (include "trainstack.teams" . | fromJsonArray) -}}
true
{{- end -}}
{{- end -}}
