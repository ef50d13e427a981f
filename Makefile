# mcpbridge — every target a user or CI needs. A fresh Debian machine with Go needs nothing else:
# targets install what they use (protoc from Debian's protobuf-compiler, Go plugins pinned in
# go.mod's tool directives).

GO        ?= go
BIN       := bin/mcpbridge
CONFIG    ?= config.yaml
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X github.com/mcpbridge/mcpbridge/internal/buildinfo.Version=$(VERSION)
# go test flags: the race detector is always on.
TESTFLAGS ?= -race -count=1 -timeout 15m
BENCHTIME ?= 1x

.PHONY: all build run test bench bench-scale generate lint fuzz fuzz-model tools-protoc clean image e2e-istiod e2e-istiod-parity

all: build

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/mcpbridge

run: build
	./$(BIN) serve --config $(CONFIG)

# deploy/ is a Go module of its own (the Helm chart's tests, with Helm and Kubernetes modules
# the bridge does not need): ./... of the main module does not reach it. So is e2e/xdsv2, the
# xDS v2 test with grpc-go 1.34's xDS client against a real bridge process (5s once built).
# The Kubernetes source's tests run a real kube-apiserver: kubeapi (below), built first
# (minutes the first time, then cached in bin/e2e/). scripts/test-deps.sh installs what else
# the tests run (Debian's etcd-server, zookeeper, gcc for -race, chromium) when missing, as
# root; otherwise it says in one line which command to run.
KUBEAPI_BIN := bin/e2e/kubeapi
test: $(KUBEAPI_BIN)
	./scripts/test-deps.sh
	$(GO) vet ./...
	MCPBRIDGE_KUBEAPI=$(abspath $(KUBEAPI_BIN)) $(GO) test $(TESTFLAGS) ./...
	cd deploy/image && $(GO) vet ./... && $(GO) test $(TESTFLAGS) ./...
	cd deploy && $(GO) vet ./... && $(GO) test $(TESTFLAGS) ./...
	cd e2e/xdsv2 && $(GO) vet ./... && $(GO) test $(TESTFLAGS) ./...

# The container image, without a Docker daemon or a registry (deploy/image, a module of its
# own): a tarball for docker load, podman load, ctr images import and kind load image-archive,
# and its digest. Timestamps come from the last commit (SOURCE_DATE_EPOCH), so the same commit
# gives the same digest. IMAGE_TAG names the image: mcpbridge:dev, the image the Helm chart
# deploys by default (deploy/helm's tests hold the two together); IMAGE_TAG= names it
# mcpbridge:VERSION. PLATFORMS empty builds for this machine's platform alone: a docker save
# tarball, which every docker load takes. Several (PLATFORMS=linux/amd64,linux/arm64) build one
# image each and their OCI image index, in an OCI image layout tarball: containerd (ctr, kind),
# podman, and Docker with the containerd image store load it; Docker's classic store cannot.
IMAGE             ?= bin/mcpbridge-image.tar
IMAGE_TAG         ?= mcpbridge:dev
PLATFORMS         ?=
REVISION          ?= $(shell git rev-parse HEAD 2>/dev/null)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
image:
	cd deploy/image && SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(GO) run . -src $(CURDIR) \
	  -version '$(VERSION)' -revision '$(REVISION)' -tag '$(IMAGE_TAG)' -platforms '$(PLATFORMS)' \
	  -o $(abspath $(IMAGE))

# Benchmarks only (no tests): numbers for CONTRACT.md section 7. BENCHTIME=2s for steadier figures.
bench: $(KUBEAPI_BIN)
	MCPBRIDGE_KUBEAPI=$(abspath $(KUBEAPI_BIN)) $(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./...

# The black-box scale run (bench/scale): SCALE_N ServiceEntries in SCALE_FILES files (1,000
# a file), a real mcpbridge process with its default limits, an MCP client and an Envoy-like
# client; time to ready and to each client holding everything, a new client's answer once
# ready (what readiness promises), CPU (and the garbage collector's, as the runtime estimates
# it), peak RSS, edit-to-served,
# and the largest resource of each Envoy type. make bench runs it with 10,000.
# SCALE_BENCH=ScaleRestartFromEtcd runs the warm restart from etcd instead (ScaleInProcess:
# the same load in the test's process, for -cpuprofile); SCALE_FLAGS adds flags
# (-scale.cpu-profile FILE, -scale.profiles DIR, ...).
SCALE_N ?= 100000
SCALE_FILES ?= $(shell n=$$(( $(SCALE_N) / 1000 )); [ $$n -gt 0 ] && echo $$n || echo 1)
SCALE_BENCH ?= ScaleFromFiles
bench-scale:
	$(GO) test -run '^$$' -bench '$(SCALE_BENCH)' -benchtime 1x -timeout 60m ./bench/scale/ -scale.n=$(SCALE_N) -scale.files=$(SCALE_FILES) -scale.largest $(SCALE_FLAGS)

# Short runs of every fuzz target (FUZZTIME each). Go runs one fuzz target per invocation.
# Then a long run of the engine's model-based test (source/model_*_test.go, a model that shares
# no code with the engine): MODELCHECKS random schedules in process, MODELSOCKETCHECKS over
# loopback sockets (make test runs 100 and 25).
FUZZTIME ?= 20s
MODELCHECKS ?= 20000
MODELSOCKETCHECKS ?= 500
fuzz: fuzz-model
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; done

fuzz-model:
	$(GO) test -run '^TestEngineAgainstModel$$' -count=1 -timeout 60m ./source/ -rapid.checks=$(MODELCHECKS)
	$(GO) test -run '^TestEngineAgainstModelOverSockets$$' -count=1 -timeout 60m ./source/ -rapid.checks=$(MODELSOCKETCHECKS)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd deploy/image && $(GO) vet ./...
	cd deploy && $(GO) vet ./...
	cd e2e/xdsv2 && $(GO) vet ./...
	cd e2e/xdsv2/v2descriptors && $(GO) vet ./...

# The istiod end-to-end test (docs/istiod.md), not part of make test: a real istiod whose only
# config source is the bridge, and a proxy of that istiod. ISTIOD_VERSION is the one pin of
# istiod: istio.io/istio is published as pseudo-versions only. pilot-discovery is built once
# per version into bin/istiod/VERSION/ (about 7 minutes on 2 cores, then cached); kubeapi, the
# Kubernetes API server istiod needs (e2e/istiod/kubeapi, a module of its own), into bin/e2e/.
# Neither enters the bridge's go.mod.
ISTIOD_VERSION ?= v0.0.0-20260827124520-eed52ebb66ad
ISTIOD_BIN     := bin/istiod/$(ISTIOD_VERSION)/pilot-discovery

$(ISTIOD_BIN):
	GOBIN=$(abspath $(dir $@)) $(GO) install istio.io/istio/pilot/cmd/pilot-discovery@$(ISTIOD_VERSION)

$(KUBEAPI_BIN): e2e/istiod/kubeapi/main.go e2e/istiod/kubeapi/go.mod e2e/istiod/kubeapi/go.sum
	cd e2e/istiod/kubeapi && $(GO) build -o $(abspath $@) .

e2e-istiod: $(ISTIOD_BIN) $(KUBEAPI_BIN)
	$(GO) test -tags e2e_istiod -count=1 -timeout 20m -v -skip TestIstiodParity ./e2e/istiod/ \
	  -istiod=$(abspath $(ISTIOD_BIN)) -kubeapi=$(abspath $(KUBEAPI_BIN))

# The parity test (docs/istiod.md): the scenarios of e2e/istiod/testdata/parity served to
# istiod and to the bridge, what each sends compared field family by field family. It fails
# below the parity floor; PARITY_REPORT gets the table and every mismatch's diff.
PARITY_REPORT ?= $(CURDIR)/bin/e2e/parity
e2e-istiod-parity: $(ISTIOD_BIN) $(KUBEAPI_BIN)
	$(GO) test -tags e2e_istiod -count=1 -timeout 15m -v -run '^TestIstiodParity$$' ./e2e/istiod/ \
	  -istiod=$(abspath $(ISTIOD_BIN)) -kubeapi=$(abspath $(KUBEAPI_BIN)) -parity.report=$(PARITY_REPORT) $(PARITY_FLAGS)

# protoc comes from Debian's protobuf-compiler; the Go plugins are the versions pinned in go.mod.
tools-protoc:
	@command -v protoc >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq protobuf-compiler; \
	  else sudo apt-get update -qq && sudo apt-get install -y -qq protobuf-compiler; fi; }

ISTIO_API_DIR = $(shell $(GO) list -m -f '{{.Dir}}' istio.io/api)

generate: tools-protoc
	$(GO) mod download istio.io/api
	protoc -I api -I $(ISTIO_API_DIR) -I $(ISTIO_API_DIR)/common-protos \
	  --plugin=protoc-gen-go=$$($(GO) tool -n protoc-gen-go) \
	  --plugin=protoc-gen-go-grpc=$$($(GO) tool -n protoc-gen-go-grpc) \
	  --go_out=api --go_opt=paths=source_relative \
	  --go-grpc_out=api --go-grpc_opt=paths=source_relative \
	  mcp/v1alpha1/mcp.proto \
	  envoy/type/semantic_version.proto envoy/api/v2/core/base.proto envoy/api/v2/discovery.proto \
	  envoy/api/v2/cds.proto envoy/api/v2/eds.proto envoy/api/v2/lds.proto envoy/api/v2/rds.proto \
	  envoy/service/discovery/v2/ads.proto
	protoc -I api \
	  --plugin=protoc-gen-go=$$($(GO) tool -n protoc-gen-go) \
	  --plugin=protoc-gen-go-grpc=$$($(GO) tool -n protoc-gen-go-grpc) \
	  --go_out=api --go_opt=paths=source_relative \
	  --go-grpc_out=api --go-grpc_opt=paths=source_relative \
	  linkerd/conduit/common/common.proto linkerd/conduit/destination/destination.proto \
	  linkerd/net/net.proto linkerd/destination/destination.proto

clean:
	rm -rf bin
