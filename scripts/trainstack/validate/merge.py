"""What a TrainJob's pods will be: Trainer's merge of spec.runtimePatches into its runtime, offline.

Trainer v2.3 (pkg/runtime/core/trainingruntime.go, mergeRuntimePatches) applies each runtime
patch's `trainingRuntimeSpec.template.spec` to the runtime's JobSet spec, in order, with
`strategicpatch.StrategicMergePatch(source, patch, jobsetv1alpha2.JobSetSpec{})`. The patch
semantics are those of the Go struct tags: maps merge key by key, lists with a merge key merge
item by item (an item whose key is new is appended), every other list is replaced whole (so a
patch's `capabilities.drop` replaces the runtime's), null deletes. `MERGE_KEYS` holds the merge
keys of the lists a JobSet spec can hold (JobSet v0.12 and k8s.io/api v0.36: `patchMergeKey`);
field names are unique enough across those types that the key follows from the name. Directive
keys (`$patch`, `$retainKeys`, ...) never reach the controller: the CRD's schema prunes them.
"""

from __future__ import annotations

import copy
from typing import Any

from ..jsontypes import dig

# list field -> merge key (patchStrategy merge); any other list is replaced.
MERGE_KEYS = {
    "replicatedJobs": "name",  # JobSetSpec
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name",  # PodSpec
    "volumes": "name", "imagePullSecrets": "name", "schedulingGates": "name", "resourceClaims": "name",
    "hostAliases": "ip",
    "env": "name", "volumeMounts": "mountPath", "ports": "containerPort", "volumeDevices": "devicePath",  # Container
}


def strategic_merge(original: Any, patch: Any, field: str = "") -> Any:
    """original with patch applied (neither is changed)."""
    if isinstance(patch, dict) and isinstance(original, dict):
        out = copy.deepcopy(original)
        for key, value in patch.items():
            if isinstance(key, str) and key.startswith("$"):
                continue
            if value is None:
                out.pop(key, None)
            elif key in out:
                out[key] = strategic_merge(out[key], value, key)
            else:
                out[key] = copy.deepcopy(value)
        return out
    if isinstance(patch, list) and isinstance(original, list) and field in MERGE_KEYS:
        return _merge_list(original, patch, MERGE_KEYS[field])
    return copy.deepcopy(patch)


def _merge_list(original: list, patch: list, key: str) -> list:
    out = copy.deepcopy(original)
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            out.append(copy.deepcopy(item))
            continue
        for i, existing in enumerate(out):
            if isinstance(existing, dict) and existing.get(key) == item[key]:
                out[i] = strategic_merge(existing, item)
                break
        else:
            out.append(strategic_merge({}, item))
    return out


def merged_runtime_spec(runtime_spec: dict, trainjob_spec: dict) -> dict:
    """The runtime's spec (mlPolicy, template) with the TrainJob's runtimePatches merged into template.spec."""
    out = copy.deepcopy(runtime_spec)
    template: dict = out["template"] if isinstance(out.get("template"), dict) else {}
    jobset: dict = template["spec"] if isinstance(template.get("spec"), dict) else {}
    order = {rj.get("name"): i for i, rj in enumerate(jobset.get("replicatedJobs") or []) if isinstance(rj, dict)}
    for patch in trainjob_spec.get("runtimePatches") or []:
        spec = dig(patch, "trainingRuntimeSpec", "template") or {}
        if isinstance(spec, dict) and isinstance(spec.get("spec"), dict):
            jobset = strategic_merge(jobset, spec["spec"])
    jobs = jobset.get("replicatedJobs")
    if isinstance(jobs, list):  # Trainer restores the runtime's order of replicated Jobs
        jobset["replicatedJobs"] = sorted(jobs, key=lambda rj: order.get(rj.get("name"), len(order))
                                          if isinstance(rj, dict) else len(order))
    template["spec"] = jobset
    out["template"] = template
    return out
