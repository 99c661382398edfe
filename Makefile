# trainstack: the commands a user runs. `make e2e` and `make test` install what they need.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
TS := $(VENV)/bin/trainstack
STAMP := $(VENV)/.installed
ENV ?= dev
PROVIDER ?= local
PYTEST_ARGS ?=
# The test tiers, one folder each under tests/, cheapest first (markers follow the folders: tests/conftest.py).
TIERS := unit chart integration e2e
TEST_TIMES := artifacts/test-times
# A tier's own pytest arguments: the unit and chart tiers' files are independent (each works in its own
# temporary folders; the chart tier's render cache locks its writes), so they run on every CPU, one file
# per worker (pytest-xdist). The integration tier's three workers each start the shared cluster (a local API
# server with KWOK nodes, on ports the OS picks) and share it among their files: its tests wait on controllers
# and the scheduler, so a third worker fills the waits (the figures: docs/decisions.md).
# The e2e tier runs its three groups side by side (tier-e2e).
TIER_ARGS_unit := -n auto --dist loadfile
TIER_ARGS_chart := -n auto --dist loadfile
TIER_ARGS_integration := -n 3 --dist loadfile

.PHONY: setup setup-kind setup-chart setup-cluster setup-bench venv tools deps render validate generate verify test test-fast test-unit test-chart test-integration test-e2e e2e e2e-data-cache e2e-lifecycle smoke-train bench bench-e2e bench-scale docs lint lock-check clean help
.PHONY: setup-gitops e2e-gitops test-matrix chart

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/'

# The venv's packages are installed by uv (the lock's python.uv, pinned; its cache is ~/.cache/uv), compiled
# to bytecode at install as pip does (else every tier's first processes compile the same modules at once);
# faster than pip (docs/decisions.md). pip stays in the venv for the wheel downloads of
# `trainstack smoke install` (which installs with this uv too). The package itself (editable) is compiled here as
# well: where PYTHONDONTWRITEBYTECODE is set nothing else writes its bytecode, and every process would compile it.
UV_VERSION := $(shell sed -n 's/^  uv: "\(.*\)"$$/\1/p' trainstack.lock.yaml)

# _version.py: the package's metadata carries the version (pyproject's dynamic version), so a new release reinstalls.
$(STAMP): pyproject.toml scripts/trainstack/_version.py trainstack.lock.yaml
	@test -n "$(UV_VERSION)" || { echo "error: trainstack.lock.yaml: python.uv (the pinned uv version) is missing" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)
	$(VENV)/bin/uv pip install --quiet --compile-bytecode --python $(VENV)/bin/python -e '.[test]'
	$(VENV)/bin/python -m compileall -q -j 0 scripts/trainstack
	touch $(STAMP)

venv: $(STAMP) ## create .venv with the trainstack package

setup-chart: venv ## the chart tier: helm v4 and v3, kustomize and the chart dependencies (enough for render, validate, docs)
	@echo '$(TS) tools install --tier chart && $(TS) deps' >&2  # stderr: make render's stdout stays clean YAML
	@$(TS) tools install --tier chart >&2
	@$(TS) deps >&2

setup-kind: setup-chart ## what `make e2e PROVIDER=kind` needs where Docker answers (users' CI): setup-chart + kind; no Debian packages, no Kubernetes build
	$(TS) tools install kind

setup: setup-chart ## setup-chart + the cluster tools + the real node's Debian packages + torch (each step skips itself when done)
	$(TS) tools install
	$(TS) node prereqs
	$(TS) smoke install

tools: venv ## build the pinned CLIs into ~/.cache/trainstack
	$(TS) tools install

deps: venv ## chart dependencies (OCI, else pinned upstream source)
	$(TS) deps

render: setup-chart ## render ENV (default dev) to stdout: clean YAML (the setup's output goes to stderr)
	@$(TS) render --env $(ENV)

validate: setup-chart ## validate ENV (default dev): schemas, CRD CEL rules, formats, admission policies
	$(TS) validate --env $(ENV) --policies

chart: setup-chart ## the chart as one reproducible archive in dist/ (dependencies and CRDs inside); SIGN=KEY adds helm provenance signed by that gpg key
	$(TS) chart package --out-dir dist $(if $(SIGN),--sign $(SIGN))

docs: venv ## regenerate generated docs (chart README, values.schema.json, the tables of docs/runtimes.md and docs/guardrails.md)
	$(TS) docs

generate: setup-chart ## regenerate every generated file: the lock's and the release's versions, the Kueue configuration (upstream's default + ours), CHANGELOG.md, the docs, the guard-rail review, bench/results/README.md's table, docs/architecture.md's module map, the golden renders (tests/chart/golden/)
	$(TS) generate

verify: setup-chart ## regenerate every generated file into a scratch copy of the checkout; fail naming each one that differs
	$(TS) verify

lock-check: venv ## check the lock file and Chart.lock
	$(TS) lock check

lint: setup-chart ## ruff, helm lint --strict with each environment's values, the layer contract (layers.toml, docs/architecture.md) and mypy; all pinned; then make verify
	$(TS) lint
	$(TS) verify

setup-cluster: setup-chart ## setup-chart + the cluster tools (etcd, kube-apiserver, KWOK, the controllers): no Debian packages, no torch
	$(TS) tools install
	$(TS) deps

# The machine's busy CPU time in clock ticks (/proc/stat's cpu line: user, nice, system, irq, softirq, steal;
# tests/support/tier_times.py busy_ticks reads the same fields), empty where there is no /proc/stat.
BUSY_TICKS := awk '/^cpu /{print $$2+$$3+$$4+$$7+$$8+$$9}' /proc/stat 2>/dev/null
# tier-TIER: pytest over tests/TIER alone (no prerequisites: the test-* targets bring them; tier-e2e below). Prints the wall
# time and writes $(TEST_TIMES)/TIER.json (tier, seconds, the machine's CPU seconds and busy share, exit, counts
# from pytest's junit XML);
# exit 5 (no tests collected) is a failure.
$(addprefix tier-,$(filter-out e2e,$(TIERS))): tier-%:
	@mkdir -p $(TEST_TIMES); start=$$(date +%s.%N); cpu=$$($(BUSY_TICKS)); \
	$(VENV)/bin/pytest tests/$* --junitxml=$(TEST_TIMES)/$*.xml $(TIER_ARGS_$*) $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests in tests/$*" >&2; rc=1; fi; \
	$(VENV)/bin/python tests/support/tier_times.py $* $$start $$rc $(TEST_TIMES) $$cpu; exit $$rc

# tier-e2e: the e2e tier's modules in three pytest processes side by side (tests/support/e2e_tier.py,
# tests/e2e/conftest.py): the real-node modules one after another, a second real-node group (the real platform,
# node loss, the kind provider), and the KWOK and local-process ones beside them; JUnit files e2e.xml,
# e2e-real2.xml and e2e-beside.xml, each group's time in e2e-groups.json.
tier-e2e:
	@mkdir -p $(TEST_TIMES); start=$$(date +%s.%N); cpu=$$($(BUSY_TICKS)); \
	$(VENV)/bin/python tests/support/e2e_tier.py $(TEST_TIMES) $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests in tests/e2e" >&2; rc=1; fi; \
	$(VENV)/bin/python tests/support/tier_times.py e2e $$start $$rc $(TEST_TIMES) $$cpu; exit $$rc

test: setup-gitops lint ## make lint, then every tier in order (unit, chart, integration, e2e; all run, any failure fails)
	@rc=0; for tier in $(TIERS); do $(MAKE) --no-print-directory tier-$$tier || rc=1; done; exit $$rc

test-unit: venv ## the unit tier (tests/unit): pure Python, no built tools, seconds
	@$(MAKE) --no-print-directory tier-unit

test-fast: test-unit ## the same as test-unit

test-chart: setup-chart ## the chart tier (tests/chart): what values do to the rendered objects (helm, kustomize)
	@$(MAKE) --no-print-directory tier-chart

test-integration: setup-cluster ## the integration tier (tests/integration): one local API server with KWOK nodes and the controllers
	@$(MAKE) --no-print-directory tier-integration

test-e2e: setup-gitops ## the e2e tier (tests/e2e): the real node, torch, whole e2e, gitops (Argo CD) and lifecycle runs
	@$(MAKE) --no-print-directory tier-e2e

# `make e2e PROVIDER=kind` where a Docker engine answers (users' CI) needs only setup-kind: kind's published node image
# and the published images; elsewhere the kind provider assembles its node image and builds its images (make setup).
E2E_SETUP := setup
ifeq ($(PROVIDER),kind)
ifneq ($(shell docker version --format '{{.Server.Version}}' 2>/dev/null),)
E2E_SETUP := setup-kind
endif
endif

e2e: $(E2E_SETUP) ## smoke TrainJobs end to end (PROVIDER=local|kind|existing|auto, ENV=dev)
	$(TS) e2e --provider $(PROVIDER) --env $(ENV)

setup-gitops: setup ## make setup + the gitops tier: Argo CD (built from its module with the pinned Go toolchain); make test and test-e2e build it, make e2e does not need it (its cold build time: bench/results/README.md)
	$(TS) tools install --tier gitops

e2e-gitops: setup-gitops ## the platform synced from git by a stock Argo CD (no plugin) on one real node of the local cluster (its TrainJobs are single-node; training across nodes is make e2e's)
	$(TS) e2e --provider local --env $(ENV) --gitops --real-nodes 1

e2e-data-cache: setup ## make e2e with the LWS data cache on
	$(TS) e2e --provider $(PROVIDER) --env $(ENV) --data-cache

e2e-lifecycle: setup ## upgrade from the last release (helm v4, then v3), rollback, faults (KWOK and real nodes, a node lost), backup restore, migration from upstream's chart (make test runs it too)
	$(VENV)/bin/pytest tests/e2e/test_lifecycle.py tests/e2e/test_lifecycle_real.py tests/e2e/test_node_loss.py tests/e2e/test_migrate_live.py $(PYTEST_ARGS)

smoke-train: venv ## real torch DDP training smoke (two ranks on this machine)
	$(TS) smoke install
	$(TS) smoke train

test-matrix: setup ## every tested Kubernetes release (lock: kubernetes.version and .matrix): build it, validate, e2e on KWOK nodes, upgrade from N-1, upgrade of the cluster to the next release, e2e on real nodes -> bench/results/matrix.json (not in make test; KUBE_VERSIONS=1.33,1.37 for some, MATRIX_PARTS=build,e2e for some parts)
	$(TS) bench matrix $(if $(KUBE_VERSIONS),--kube-versions $(KUBE_VERSIONS)) $(if $(MATRIX_PARTS),--matrix-parts $(MATRIX_PARTS))

setup-bench: setup ## make setup + the benchmarks' second validation peer (kubectl-validate)
	$(TS) tools install --tier bench

bench: setup-bench ## benchmarks (validate, e2e, scale, gitops); results in bench/results/
	$(TS) bench

bench-e2e: setup ## warm time of make e2e, PROVIDERS=local,kind side by side (default local) -> bench/results/e2e.json
	$(TS) bench e2e $(if $(PROVIDERS),--provider $(PROVIDERS))

bench-scale: setup ## 1,000 TrainJobs vs raw JobSets vs raw Jobs on 100 KWOK GPU nodes -> bench/results/scale.{json,png}
	$(TS) bench scale

clean: ## remove the venv and built chart dependencies (the tool cache stays)
	rm -rf $(VENV) charts/trainstack/charts charts/trainstack/crds dist
