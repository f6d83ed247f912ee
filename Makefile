# Tusk — run `make help` for the targets.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

VERSION    ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT     ?= $(shell git rev-parse HEAD 2>/dev/null)
BUILD_DATE ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
LDFLAGS := -s -w \
	-X tusk.dev/tusk/internal/version.Version=$(VERSION) \
	-X tusk.dev/tusk/internal/version.Commit=$(COMMIT) \
	-X tusk.dev/tusk/internal/version.BuildDate=$(BUILD_DATE)

# Tools and test binaries are built once into the cache (hack/lib.sh).
CONTROLLER_GEN = $(shell hack/tools.sh controller-gen)
GOLANGCI_LINT  = $(shell hack/tools.sh golangci-lint)
GOTESTSUM      = $(shell hack/tools.sh gotestsum)

GO_TEST_FLAGS ?= -count=1
# Each gotestsum run also writes its go test -json stream here, for the
# slowest-tests list .ci/run prints (make slowest).
TEST_REPORTS ?= $(CURDIR)/.cache/test-reports

# Everything builds with the toolchain go.mod names (its `toolchain` line,
# fetched through the Go module proxy), even where Go's own env file says
# GOTOOLCHAIN=local; an explicit GOTOOLCHAIN in the environment wins.
export GOTOOLCHAIN ?= auto

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} /^[a-zA-Z_-]+:.*?##/ { printf "  %-18s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: generate
generate: ## Regenerate deepcopy code from the API types.
	$(CONTROLLER_GEN) object paths=./api/...

.PHONY: manifests
manifests: ## Regenerate CRDs and RBAC from kubebuilder markers.
	$(CONTROLLER_GEN) crd rbac:roleName=tusk-operator paths=./... \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac

.PHONY: build
build: ## Build bin/tusk, and bin/kubectl-tusk (the kubectl plugin: the same binary under that name).
	CGO_ENABLED=0 go build -trimpath -ldflags "$(LDFLAGS)" -o bin/tusk ./cmd/tusk
	ln -sfn tusk bin/kubectl-tusk

.PHONY: fmt
fmt: ## Format the Go code.
	gofmt -w $$(git ls-files '*.go')

##@ Tests

.PHONY: test
test: verify integration ## Everything CI checks: generated files, gofmt, vet, lint, then unit and integration tests.

.PHONY: verify
verify: verify-generated verify-fmt vet lint vulncheck ## Static checks only.

.PHONY: vulncheck
vulncheck: ## govulncheck against the pinned vulnerability database (from the module proxy): fails on any vulnerability the code reaches, in a module or in the Go standard library.
	hack/vulncheck.sh

.PHONY: verify-generated
verify-generated: ## Fail if generated code or manifests are stale.
	hack/verify-generated.sh

.PHONY: verify-fmt
verify-fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "Not gofmt-formatted (run make fmt):"; echo "$$out"; exit 1; fi

.PHONY: vet
vet: ## go vet, with the integration tests included.
	go vet -tags integration,e2e ./...
	cd hack/imagebuild && go vet ./...

.PHONY: lint
lint: ## golangci-lint with .golangci.yml.
	$(GOLANGCI_LINT) run --allow-serial-runners --build-tags integration,e2e ./...
	cd hack/imagebuild && $(GOLANGCI_LINT) run --allow-serial-runners ./...

.PHONY: unit
unit: ## Unit tests: pure functions, no servers.
	$(GOTESTSUM) --format testname -- $(GO_TEST_FLAGS) ./...

.PHONY: integration
integration: ## Unit tests plus integration tests: controllers and CRDs on a real kube-apiserver and etcd (envtest), the instance manager on real PostgreSQL, the pooler's PgBouncer against it, backups on a real S3 server (MinIO), alert rules and scrapes with a real promtool, major upgrades in the PostgreSQL images' root filesystems (as root).
	@mkdir -p $(TEST_REPORTS)
	KUBEBUILDER_ASSETS=$$(hack/build-k8s.sh kube-apiserver etcd) TUSK_PG_BINDIR=$$(hack/install-postgres.sh) \
	TUSK_PG_BINDIR_17=$$(hack/install-postgres-rootfs.sh 17) TUSK_PGBOUNCER=$$(hack/install-pgbouncer.sh) \
	TUSK_MINIO_BIN=$$(hack/install-minio.sh) TUSK_PROMETHEUS_BINDIR=$$(hack/install-prometheus.sh) \
	TUSK_PROMETHEUS_OPERATOR_CRDS=$$(hack/install-prometheus-operator-crds.sh) \
	TUSK_PG_ROOTFS_15=$$(hack/images.sh rootfs 15) TUSK_PG_ROOTFS_17=$$(hack/images.sh rootfs 17) TUSK_PG_ROOTFS_18=$$(hack/images.sh rootfs 18) \
		$(GOTESTSUM) --jsonfile $(TEST_REPORTS)/integration.json --format testname -- $(GO_TEST_FLAGS) -tags integration ./...

.PHONY: bench
bench: ## Benchmarks that print figures (docs/benchmarks.md); BENCHTIME=3x by default, BENCH=<regexp> picks some.
	TUSK_PG_BINDIR=$$(hack/install-postgres.sh) TUSK_MINIO_BIN=$$(hack/install-minio.sh) \
		go test -tags integration -run '^$$' -bench "$${BENCH:-.}" -benchtime $${BENCHTIME:-3x} ./test/instance/ ./test/backup/ ./test/operator/

# Fuzz targets: package and function. Their seeds are in the tests (f.Add);
# a failure the fuzzer finds is written under the package's testdata/fuzz
# and replays with every go test from then on.
FUZZ_TARGETS = ./internal/instance/pgconf:FuzzPostgresqlConfValue ./internal/instance/pgconf:FuzzPrimaryConnInfo \
	./internal/instance/pgconf:FuzzPgHBAExtraRule ./internal/instance:FuzzConfigRequest ./internal/basebackup:FuzzParseManifest

# The budget is a count of inputs, not a duration: a count is the same work
# however busy the machine is, and with Go 1.26 (which go.mod's go line still
# allows) a duration can fail a target that found nothing ("context deadline
# exceeded" just past the budget, no input written) when its deadline's
# cancellation races the check that treats it as the normal end
# (golang/go#75804, fixed in Go 1.27). A count has no deadline to race.
# Minimizing a new input needs no bound of its own: its runs count against
# the budget too.
FUZZTIME ?= 40000x

# make fuzz builds first, then fuzzes, and prints each part's time. Fuzzing
# needs every package the test imports (the standard library's too) compiled
# again with coverage instrumentation, a build of its own that make test's
# does not warm: after a new toolchain or dependency it takes minutes on
# CI's two cores (312 s from an empty cache, 210 s of it internal/instance's,
# which with its tests imports client-go), once cached 6-8 s of linking.
# Each target then starts from its seeds and testdata/fuzz alone, in a
# corpus directory of this run, not go test's $(go env GOCACHE)/fuzz: that
# keeps every input any earlier run found and replays them all before
# fuzzing (20-50 ms each for FuzzConfigRequest), so the stage grew with the
# cache's age and fell back on a fresh one. 40000 inputs take 1-5 s per
# target, FuzzConfigRequest 11-25 s (325 KB of coverage counters to scan
# per input, to pgconf's 46 KB).
FUZZ_DIR = $(CURDIR)/.cache/fuzz
FUZZ_PKGS = $(sort $(foreach t,$(FUZZ_TARGETS),$(firstword $(subst :, ,$(t)))))

.PHONY: fuzz
fuzz: ## Build the fuzz targets' packages with coverage instrumentation, then run each target for FUZZTIME inputs (40000x, as CI does; a duration such as 10m works too) from its seeds and testdata/fuzz.
	@rm -rf $(FUZZ_DIR) && mkdir -p $(FUZZ_DIR) && built=0 fuzzed=0 && \
	bin() { echo $(FUZZ_DIR)/$$(echo $${1#./} | tr / _).test; } && \
	for p in $(FUZZ_PKGS); do \
		start=$$(date +%s); \
		go test -c -fuzz . -o $$(bin $$p) $$p || exit 1; \
		s=$$(( $$(date +%s) - start )); built=$$(( built + s )); \
		echo "== $$p built for fuzzing in $$s s"; \
	done && \
	for t in $(FUZZ_TARGETS); do \
		p=$${t%%:*} f=$${t#*:}; \
		echo "== $$f ($$p), $(FUZZTIME)"; \
		start=$$(date +%s); \
		(cd $$p && $$(bin $$p) -test.run '^$$' -test.fuzz "^$$f$$" -test.fuzztime $(FUZZTIME) \
			-test.fuzzcachedir $(FUZZ_DIR)/corpus/$${p#./}) || exit 1; \
		s=$$(( $$(date +%s) - start )); fuzzed=$$(( fuzzed + s )); \
		echo "== $$f took $$s s"; \
	done && \
	rm -f $(FUZZ_DIR)/*.test && \
	echo "== fuzz: $$built s building, $$fuzzed s fuzzing"

.PHONY: bench-upgrade
bench-upgrade: ## Upgrade figures (docs/upgrades.md): each step of an upgrade from 15 to 17 of about 1 GiB, link and copy modes; as root.
	TUSK_PG_ROOTFS_15=$$(hack/images.sh rootfs 15) TUSK_PG_ROOTFS_17=$$(hack/images.sh rootfs 17) \
		go test -tags integration -run '^$$' -bench Upgrade1GiB -benchtime 1x -timeout 30m ./test/upgrade/

.PHONY: bench-operator
bench-operator: ## The operator's live heap before and after 2,000 Secrets of 64 KiB that are not Tusk's, and 300 Secrets, ConfigMaps, Roles and Services a tenant labels as Tusk's (900 KiB of data or rules, 200 KiB of annotations each; it must not grow with them).
	go test -tags integration -run '^$$' -bench OperatorMemory -benchtime 1x ./test/operator/

.PHONY: bench-cluster
bench-cluster: ## Cluster figures on the cluster in KUBECONFIG (after make images deploy): create to Ready, adding a replica vs pg_basebackup.
	hack/bench-cluster.sh

.PHONY: minio
minio: ## Build the MinIO server the backup tests run as their S3 server and print where it is.
	@hack/install-minio.sh

.PHONY: prometheus
prometheus: ## Build Prometheus and promtool (the rules' and metrics' tests, e2e monitoring) and print their directory.
	@hack/install-prometheus.sh

.PHONY: envtest-assets
envtest-assets: ## Build kube-apiserver and etcd for envtest and print where they are.
	@hack/build-k8s.sh kube-apiserver etcd

##@ Local cluster, images, deploy, end-to-end

# The local cluster's kubeconfig is the default when KUBECONFIG is unset.
LOCAL_KUBECONFIG := $(CURDIR)/.cache/local-cluster/kubeconfig
ifeq ($(origin KUBECONFIG),undefined)
ifneq ($(wildcard $(LOCAL_KUBECONFIG)),)
export KUBECONFIG := $(LOCAL_KUBECONFIG)
endif
endif

.PHONY: cluster-up
cluster-up: ## Start the local single-node Kubernetes (root; builds what is missing).
	hack/local-cluster up

.PHONY: cluster-down
cluster-down: ## Stop the local cluster and remove its state (harmless when it is not up).
	hack/local-cluster down

.PHONY: cluster-status
cluster-status: ## Node readiness and component health of the local cluster.
	hack/local-cluster status

.PHONY: images
images: ## Build the operator and PostgreSQL images; load them into the local cluster or kind when KUBECONFIG points at one.
	hack/images.sh images

.PHONY: test-images
test-images: ## Build the images only the e2e tests run (the MinIO S3 server, Prometheus) and load them like make images.
	hack/images.sh images minio prometheus

.PHONY: deploy
deploy: ## Install the operator (config/default) into the cluster in KUBECONFIG and wait for it.
	kubectl apply -k config/default
	kubectl -n tusk-system rollout status deployment/tusk-operator --timeout=180s

.PHONY: undeploy
undeploy: ## Remove the operator, its CRDs and everything they own from the cluster in KUBECONFIG.
	kubectl delete -k config/default --ignore-not-found --wait=true

E2E_ARTIFACTS ?= $(CURDIR)/.cache/e2e-artifacts
# How many e2e tests run at once after the serial group (test/e2e's
# parallel and serial); why 4: docs/development.md.
E2E_PARALLEL ?= 4
# A generous bound: a test killed by -timeout leaves no artifacts (its
# cleanup never runs), and the lifecycle tests take minutes each.
E2E_FLAGS ?= -count=1 -timeout=60m -parallel=$(E2E_PARALLEL)

.PHONY: e2e
e2e: images test-images deploy ## End-to-end tests against the cluster in KUBECONFIG (the local cluster by default): the serial group alone, then the rest E2E_PARALLEL at a time.
	@mkdir -p $(TEST_REPORTS)
	E2E_ARTIFACTS=$(E2E_ARTIFACTS) $(GOTESTSUM) --jsonfile $(TEST_REPORTS)/e2e.json --format standard-verbose -- $(E2E_FLAGS) -tags e2e ./test/e2e/...

.PHONY: e2e-long
e2e-long: ## make e2e with the long tier too (TUSK_E2E_LONG=1): the upgrade chain and the tests CI has no time for.
	TUSK_E2E_LONG=1 $(MAKE) e2e

.PHONY: slowest
slowest: ## The 15 slowest tests of the last make test, e2e and chaos runs (their reports in TEST_REPORTS).
	@hack/slowest.sh 15 $(wildcard $(TEST_REPORTS)/*.json)

# make chaos: SEED orders the faults; DURATION (a Go duration) keeps
# injecting until it has passed, empty runs each fault twice; FAULTS is a
# comma list (docs/chaos.md), empty is the set the operator survives today;
# HOLD is how long a freeze or a network cut lasts (20s); MODE is sync
# (synchronous quorum, nothing lost: the default) or async (loss bounded);
# LEASE is the primary Lease's "duration,renewal" (10s,2s).
SEED     ?=
DURATION ?=
FAULTS   ?=
HOLD     ?=
MODE     ?=
LEASE    ?=

.PHONY: chaos
chaos: images deploy ## Chaos test (docs/chaos.md): random faults under the workload writer, nothing acknowledged lost (MODE=async: loss bounded); SEED= DURATION= FAULTS= HOLD= MODE= LEASE=.
	@mkdir -p $(TEST_REPORTS)
	E2E_ARTIFACTS=$(E2E_ARTIFACTS) TUSK_CHAOS=1 TUSK_CHAOS_SEED="$(SEED)" TUSK_CHAOS_DURATION="$(DURATION)" \
		TUSK_CHAOS_FAULTS="$(FAULTS)" TUSK_CHAOS_HOLD="$(HOLD)" TUSK_CHAOS_MODE="$(MODE)" TUSK_CHAOS_LEASE="$(LEASE)" \
		$(GOTESTSUM) --jsonfile $(TEST_REPORTS)/chaos-$(or $(MODE),sync).json --format standard-verbose -- $(E2E_FLAGS) -tags e2e -run '^TestChaos$$' ./test/e2e/

.PHONY: bench-ha
bench-ha: images deploy ## HA figures (docs/chaos.md, docs/pooler.md): write gaps of a switchover, a deleted and an evicted primary, for the tuned and the ordinary (libpq defaults) client; the read gap of a deleted replica; through a pooler: errors, longest wait and gap of a switchover, a handover, a pooler rolling update and a network cut, beside direct clients, and pgbench -S through it against direct.
	@mkdir -p $(E2E_ARTIFACTS)
	E2E_ARTIFACTS=$(E2E_ARTIFACTS) go test $(E2E_FLAGS) -tags e2e -v \
		-run '^Test(SwitchoverUnderLoad|PrimaryPodDeletedUnderLoad|PrimaryEvictedUnderLoad|ReplicaDeletedUnderReader|HandoversThroughThePooler)$$' ./test/e2e/ | tee $(E2E_ARTIFACTS)/bench-ha.log
	@grep -o 'figure: .*' $(E2E_ARTIFACTS)/bench-ha.log

.PHONY: demo
demo: ## Bring up a cluster if none is reachable, deploy Tusk, apply the sample cluster and show its status.
	hack/demo.sh
