# carve — build, test and demo. See README.md.
GO       ?= go
# Fuzz budget per target: a count of inputs, not a duration. With a
# duration, Go 1.26's fuzz coordinator can fail a target with a bare
# "context deadline exceeded" when a loaded machine delays a worker at the
# end (go.dev/issue/75804, fixed in Go 1.27); a count has no deadline.
FUZZTIME ?= 10000x
BIN      ?= bin
# The release's version and commit, stamped into the binaries (make build,
# make release) and naming the release artifacts.
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
# The release's timestamps (image created, archive and chart file times):
# HEAD's commit time, so that a commit always gives the same artifacts.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
DIST     ?= dist
export CGO_ENABLED := 1
# go-nvml's header marks some NVML calls deprecated; every cgo file that
# includes it would print two screens of -Wdeprecated-declarations warnings.
# -O2 -g are cgo's defaults, which setting CGO_CFLAGS would otherwise drop.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations

# golangci-lint, pinned; `make lint` installs it into $(TOOLS) with go install
# (from the Go module proxy) when that version is not there yet. Bump the
# version here; the old binary is then replaced on the next `make lint`.
GOLANGCI_LINT_VERSION ?= v2.15.0
TOOLS         ?= $(abspath $(BIN))/tools
GOLANGCI_LINT := $(TOOLS)/golangci-lint-$(GOLANGCI_LINT_VERSION)

GOFILES = $(shell find . -name '*.go' -not -path './bin/*' -not -path './_output/*')

.PHONY: all build test lint unit fuzz e2e chaos bench microbench scale demo clean cluster-up cluster-down release release-check release-lock

all: build

## build: compile carve-agent, carvectl and carve-probe into ./bin, stamped
##        with VERSION and REVISION (e.g. make build VERSION=v1.2.3)
STAMP := -X github.com/carve-dev/carve/internal/buildinfo.version=$(VERSION) -X github.com/carve-dev/carve/internal/buildinfo.revision=$(REVISION)
build:
	$(GO) build -trimpath -ldflags "$(STAMP)" -o $(BIN)/ ./cmd/...

## lint: golangci-lint (.golangci.yml: go vet's checks and more, gofmt,
##       goimports) on the three modules (main, test/, release/), carve-agent also with its test-hook
##       build tag, and gofmt on every Go file whatever its build tags
lint: $(GOLANGCI_LINT)
	@out="$$(gofmt -l $(GOFILES))"; if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GOLANGCI_LINT) config verify --config $(CURDIR)/.golangci.yml
	@# Every module, even when an earlier one has findings; then fail if any had.
	@rc=0; \
	echo "$(GOLANGCI_LINT) run ./..."; $(GOLANGCI_LINT) run --config $(CURDIR)/.golangci.yml ./... || rc=1; \
	echo "$(GOLANGCI_LINT) run --build-tags carve_testhooks ./cmd/carve-agent/"; $(GOLANGCI_LINT) run --config $(CURDIR)/.golangci.yml --build-tags carve_testhooks ./cmd/carve-agent/ || rc=1; \
	echo "cd test && $(GOLANGCI_LINT) run ./..."; (cd test && $(GOLANGCI_LINT) run --config $(CURDIR)/.golangci.yml ./...) || rc=1; \
	echo "cd release && $(GOLANGCI_LINT) run ./..."; (cd release && $(GOLANGCI_LINT) run --config $(CURDIR)/.golangci.yml ./...) || rc=1; \
	exit $$rc

$(GOLANGCI_LINT):
	@echo "installing golangci-lint $(GOLANGCI_LINT_VERSION) into $(TOOLS) (once; a few minutes)"
	@rm -rf $(TOOLS)/.install && mkdir -p $(TOOLS)/.install
	GOBIN=$(TOOLS)/.install CGO_ENABLED=0 $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	@rm -f $(TOOLS)/golangci-lint-*
	mv $(TOOLS)/.install/golangci-lint $@
	@rmdir $(TOOLS)/.install

## unit: unit and integration tests of the main module, race detector on;
##       carve-agent's test hooks again with the build tag that compiles them;
##       the release module's unit tests
unit:
	$(GO) test -race -count=1 ./...
	$(GO) test -race -count=1 -tags carve_testhooks ./cmd/carve-agent/
	cd release && $(GO) test -race -count=1 ./...

## fuzz: each fuzz target of the main module (func FuzzX in a _test.go file)
##       for a fixed number of inputs (FUZZTIME, e.g. FUZZTIME=200000x)
fuzz:
	@set -e; for dir in $$(grep -rl --include='*_test.go' '^func Fuzz' --exclude-dir=test --exclude-dir=bin . | xargs -n1 dirname | sort -u); do \
		for t in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$dir/*_test.go); do \
			echo "fuzz $$dir $$t ($(FUZZTIME))"; \
			$(GO) test -run='^$$' -fuzz="^$$t\$$" -fuzztime=$(FUZZTIME) $$dir; \
		done; \
	done

## e2e: tests against a real local Kubernetes (needs root; installs packages;
##      the first run builds Kubernetes, ~8 min). They run, or fail saying
##      why; CARVE_E2E=0 asks for the test module's unit tests only.
e2e:
	@case "$${CARVE_E2E:-}" in 0|false|no) echo "CARVE_E2E=$$CARVE_E2E: end-to-end tests skipped, as asked";; \
	*) if [ "$$(id -u)" != 0 ]; then \
		echo "make e2e: the end-to-end tests need root (a local Kubernetes: containers, mounts, cgroups);" >&2; \
		echo "  run them with 'sudo -E make test', or the unit tests only with 'CARVE_E2E=0 make test'" >&2; exit 1; fi;; esac
	cd test && $(GO) test -count=1 -timeout 45m ./...

## chaos: the fault-injection runs in full (CARVE_CHAOS=full; make test runs
##        a short mode of them): an NVML failure at every operation of the
##        transition suite, the agent killed at every step, the state
##        directory unusable, and the cluster scenarios (kubelet restart, API
##        server outage, XID storm, drain across a window, clock step); writes
##        docs/reliability.md from their records, even when some fail (needs
##        root; 17 minutes measured on a 2-core machine)
chaos:
	@if [ "$$(id -u)" != 0 ]; then echo "make chaos: the end-to-end scenarios need root (a local Kubernetes); run it with 'sudo -E make chaos'" >&2; exit 1; fi
	@out="$$(mktemp -d)"; start="$$(date +%s)"; rc=0; \
	echo "CARVE_CHAOS=full CARVE_CHAOS_OUT=$$out $(GO) test -count=1 -run Chaos ./agent/"; \
	CARVE_CHAOS=full CARVE_CHAOS_OUT="$$out" $(GO) test -count=1 -timeout 20m -run 'Chaos' ./agent/ || rc=1; \
	echo "cd test && CARVE_CHAOS=full CARVE_CHAOS_OUT=$$out $(GO) test -count=1 -run Chaos ./e2e/"; \
	(cd test && CARVE_CHAOS=full CARVE_CHAOS_OUT="$$out" $(GO) test -count=1 -timeout 40m -run 'Chaos' ./e2e/) || rc=1; \
	(cd test && $(GO) run ./cmd/carve-chaos --records "$$out" --write $(CURDIR)/docs/reliability.md --started "$$start" --command "make chaos") || rc=1; \
	if [ $$rc = 0 ]; then rm -rf "$$out"; else echo "make chaos: failed; the records are in $$out" >&2; fi; exit $$rc

## test: everything CI runs
test: lint unit fuzz release-check e2e

## release: the release into $(DIST)/ (docs/release.md): the agent image
##          for linux/amd64 and linux/arm64 as an OCI layout archive,
##          carvectl for linux and darwin, the chart, SBOMs, SHA256SUMS;
##          runs the arm64 image's programs under qemu. Needs mmdebstrap,
##          apt-utils, gcc-aarch64-linux-gnu, libc6-dev-arm64-cross,
##          qemu-user-static. VERSION, REVISION, SOURCE_DATE_EPOCH override.
release: $(BIN)/carve-release
	$(BIN)/carve-release build --full --dist $(DIST) --version $(VERSION) --revision $(REVISION) --source-date-epoch $(SOURCE_DATE_EPOCH)

## release-check: the quick release (linux/amd64 image and carvectl, chart,
##                SBOMs, sums) into $(DIST)/, built twice, the second time
##                from a copy of the source elsewhere: fails unless both
##                SHA256SUMS are the same
release-check: $(BIN)/carve-release
	$(BIN)/carve-release check --dist $(DIST) --version $(VERSION) --revision $(REVISION) --source-date-epoch $(SOURCE_DATE_EPOCH)

## release-lock: pin the newest Debian packages of the image base
##               (release/base.lock.json); commit the result
release-lock: $(BIN)/carve-release
	$(BIN)/carve-release lock

$(BIN)/carve-release: FORCE
	cd release && $(GO) build -ldflags "-X main.version=$(VERSION)" -o ../$(BIN)/carve-release ./cmd/carve-release

## bench: every headline figure beside its baseline, in one run, rewriting
##        docs/benchmarks.md: Allocate against the kubelet's stub device
##        plugin, the planner against wipe-and-recreate and a brute-force
##        search, a live update against a plugin restart and their API
##        requests, the agent's memory, the packing of on-demand MIG
##        devices, claim-to-running latency (needs root for the local
##        cluster; about 23 minutes on 2 cores). BENCH=allocate,reconfig,
##        planning,live,memory,packing,claims runs those only and prints
##        them without writing.
##        make test runs the short mode of each (test/bench).
bench: build
	cd test && $(GO) run ./cmd/carve-bench --agent $(abspath $(BIN))/carve-agent $(if $(BENCH),--only $(BENCH),--write $(CURDIR)/docs/benchmarks.md)

## microbench: the Go micro-benchmarks of the main module (go test -bench)
microbench:
	$(GO) test -run='^$$' -bench=. -benchmem ./...

## scale: many carve agents on one local API server (50, 200, 500 nodes;
##        needs root): convergence, the rollout bound, API requests, CPU and
##        memory, written to docs/scale.md and docs/scale.svg
scale: $(BIN)/carve-scale
	$(BIN)/carve-scale --write docs/scale.md $(SCALE_FLAGS)

$(BIN)/carve-scale: FORCE
	cd test && $(GO) build $(CLUSTER_GOFLAGS) -o ../$(BIN)/carve-scale ./cmd/carve-scale

## demo: the main job on the embedded default: a local real cluster, carve-agent
##       on a simulated DGX H100 whose MIG operations take as long as on
##       hardware, the example profiles, whole GPUs -> balanced MIG ->
##       time-sliced (needs root; the first run builds Kubernetes)
demo: $(BIN)/carve-agent $(BIN)/carve-demo
	$(BIN)/carve-demo --agent $(BIN)/carve-agent --profiles configs/examples/profiles.yaml --gpus sim:dgx-h100 --sim-latency realistic $(DEMO_FLAGS)

# The demo's programs and the test module's are built with the flags
# test/cluster builds Kubernetes and containerd with (cluster.BuildFlags; a
# test in test/cluster keeps them equal), and the main module's
# dependencies have the versions the test module selects (a test checks
# that too): the packages all of them use (client-go, apimachinery, grpc,
# ...) are then compiled once into Go's build cache, not once per program.
# No DWARF (the compiler is a third faster without it), no paths.
CLUSTER_GOFLAGS := -trimpath -gcflags=all=-dwarf=false
# The demo needs carve-agent alone of carve's programs. scripts/gobuild
# says what it builds and, on a cold cache, how far it is every 20 s.
$(BIN)/carve-agent: FORCE
	@GO=$(GO) scripts/gobuild $@ ./cmd/carve-agent $(CLUSTER_GOFLAGS) -ldflags "$(STAMP)"

$(BIN)/carve-demo: FORCE
	@cd test && GO=$(GO) ../scripts/gobuild ../$@ ./cmd/carve-demo $(CLUSTER_GOFLAGS)

## cluster-up / cluster-down: a local single-node Kubernetes to play with
$(BIN)/carve-cluster: FORCE
	cd test && $(GO) build $(CLUSTER_GOFLAGS) -o ../$(BIN)/carve-cluster ./cluster/cmd/carve-cluster

cluster-up: $(BIN)/carve-cluster
	$(BIN)/carve-cluster up -d

cluster-down: $(BIN)/carve-cluster
	$(BIN)/carve-cluster down

FORCE:

## clean: remove what build, release, demo and cluster-up built; keep the
##        tools (and the release's cache of Debian bases)
clean:
	rm -rf $(filter-out $(TOOLS),$(abspath $(wildcard $(BIN)/*))) $(DIST)
