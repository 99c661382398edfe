"""`trainstack validate`: schema, CEL and policy checks of Kubernetes manifests, offline.

documents (YAML/JSON with lines) -> schemas (built-in kinds from the pinned Kubernetes
OpenAPI spec, CRDs from the pinned charts and Argo CD) -> engine (jsonschema-rs, formats,
Go-side semantics, CRD CEL rules) -> policies (ValidatingAdmissionPolicies) -> report.
"""
