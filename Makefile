# carve — build, test and demo. See README.md.
GO       ?= go
FUZZTIME ?= 10s
BIN      ?= bin
export CGO_ENABLED := 1

GOFILES = $(shell find . -name '*.go' -not -path './bin/*' -not -path './_output/*')

.PHONY: all build test lint unit fuzz e2e bench demo clean cluster-up cluster-down

all: build

## build: compile carve-agent and carvectl into ./bin
build:
	$(GO) build -o $(BIN)/ ./cmd/...

## lint: gofmt and go vet, both modules
lint:
	@out="$$(gofmt -l $(GOFILES))"; if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd test && $(GO) vet ./...

## unit: unit and integration tests of the main module, race detector on
unit:
	$(GO) test -race -count=1 ./...

## fuzz: each fuzz target for a short while (FUZZTIME)
fuzz:
	@set -e; for t in $$($(GO) test -list '^Fuzz' ./configs/ | grep '^Fuzz'); do \
		echo "fuzz $$t ($(FUZZTIME))"; \
		$(GO) test -run='^$$' -fuzz="^$$t\$$" -fuzztime=$(FUZZTIME) ./configs/; \
	done

## e2e: tests against a real local Kubernetes (needs root; installs packages;
##      the first run builds Kubernetes, ~8 min). CARVE_E2E=0 skips them.
e2e:
	cd test && $(GO) test -count=1 -timeout 45m ./...

## test: everything CI runs
test: lint unit fuzz e2e

## bench: benchmarks (figures go to docs/benchmarks.md)
bench:
	$(GO) test -run='^$$' -bench=. -benchmem ./...

## demo: the main job on the embedded default: a local real cluster, carve-agent
##       on a simulated DGX H100, the example profiles, whole GPUs -> balanced
##       MIG -> time-sliced (needs root; the first run builds Kubernetes)
demo: build $(BIN)/carve-demo
	$(BIN)/carve-demo --agent $(BIN)/carve-agent --profiles configs/examples/profiles.yaml --gpus sim:dgx-h100 $(DEMO_FLAGS)

$(BIN)/carve-demo: FORCE
	cd test && $(GO) build -o ../$(BIN)/carve-demo ./cmd/carve-demo

## cluster-up / cluster-down: a local single-node Kubernetes to play with
$(BIN)/carve-cluster: FORCE
	cd test && $(GO) build -o ../$(BIN)/carve-cluster ./cluster/cmd/carve-cluster

cluster-up: $(BIN)/carve-cluster
	$(BIN)/carve-cluster up -d

cluster-down: $(BIN)/carve-cluster
	$(BIN)/carve-cluster down

FORCE:

clean:
	rm -rf $(BIN)
