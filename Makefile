# watchcache-exporter. `make demo` runs it against a local real control plane;
# `make test` runs every test, the real-apiserver ones included.

GO      ?= go
PKG     := github.com/prometheus/common/version
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo unknown)
REVISION?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
BRANCH  ?= $(shell git rev-parse --abbrev-ref HEAD 2>/dev/null || echo unknown)
# The build date is the commit's, not the clock's: the same commit builds
# the same binary, so that go build finds it up to date and the image
# archives are not written again.
BUILD_DATE ?= $(shell TZ=UTC git log -1 --format=%cd --date=format-local:%Y%m%d-%H:%M:%S 2>/dev/null || echo unknown)
LDFLAGS := -s -w -X $(PKG).Version=$(VERSION) -X $(PKG).Revision=$(REVISION) -X $(PKG).Branch=$(BRANCH) \
           -X $(PKG).BuildUser=watchcache-exporter -X $(PKG).BuildDate=$(BUILD_DATE)
export CGO_ENABLED ?= 0

.PHONY: all build plugin plugin-dist image kube-bin node-bin kind-image e2e-bin prometheus chromium generate docs push bench demo test test-unit test-versions e2e vet fmt-check clean FORCE

all: build

# go build leaves an up-to-date binary as it is (same inputs, same stamp).
build: bin/watchcache-exporter
bin/watchcache-exporter: FORCE
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $@ ./cmd/watchcache-exporter

# The same binary as the kubectl plugin: kubectl runs `kubectl watchcache`
# as kubectl-watchcache on $PATH (krew's manifest: .krew.yaml).
plugin: bin/watchcache-exporter
	cp bin/watchcache-exporter bin/kubectl-watchcache

# The plugin's release archives for krew, and its manifest filled in.
PLUGIN_PLATFORMS := linux_amd64 linux_arm64 darwin_amd64 darwin_arm64
plugin-dist:
	rm -rf dist && mkdir -p dist
	set -e; for p in $(PLUGIN_PLATFORMS); do \
	  mkdir -p dist/$$p; \
	  CGO_ENABLED=0 GOOS=$${p%_*} GOARCH=$${p#*_} $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o dist/$$p/kubectl-watchcache ./cmd/watchcache-exporter; \
	  cp LICENSE dist/$$p/; \
	  tar -C dist/$$p -czf dist/kubectl-watchcache_$(VERSION)_$$p.tar.gz kubectl-watchcache LICENSE; \
	done
	set -e; grep -v '^#' krew/watchcache.yaml > dist/watchcache.yaml; \
	for p in $(PLUGIN_PLATFORMS); do \
	  sum=$$(sha256sum dist/kubectl-watchcache_$(VERSION)_$$p.tar.gz | cut -d' ' -f1); \
	  sed -i -e "s/SHA256_$$p/$$sum/" dist/watchcache.yaml; \
	done; \
	sed -i -e "s/VERSION/$(VERSION)/g" dist/watchcache.yaml

# The image, without a container engine: an archive for `ctr images import`,
# `kind load image-archive`, `podman load` or `docker load`. The labels,
# user, entrypoint and port are the Dockerfile's (a test compares them).
IMAGE     ?= ghcr.io/watchcache/watchcache-exporter
IMAGE_TAG ?= $(VERSION)
image: bin/watchcache-exporter-image.tar
	@echo "bin/watchcache-exporter-image.tar: $(IMAGE):$(IMAGE_TAG)"

# Push the image to a registry without a container engine, with the
# credentials of ~/.docker/config.json (or none):
# make push IMAGE=registry.example.com/team/watchcache-exporter IMAGE_TAG=v0.1.0
push: image
	bin/image-tool push -archive bin/watchcache-exporter-image.tar -to $(IMAGE):$(IMAGE_TAG)

# Each archive is written again only when its binary, the image tool or the
# image's name and labels changed. go build touches an up-to-date binary
# without relinking it, so the archives follow its checksum (bin/.*.sum) and
# the last name and labels (bin/.image-args), each file written only when
# its content changes.
IMAGE_ARGS := $(IMAGE):$(IMAGE_TAG) $(VERSION) $(REVISION)
bin/.image-args: FORCE
	@mkdir -p bin; echo '$(IMAGE_ARGS)' | cmp -s - $@ || echo '$(IMAGE_ARGS)' > $@
bin/.%.sum: bin/%
	@sha256sum $< | cmp -s - $@ || sha256sum $< > $@
bin/image-tool: FORCE
	cd hack/image && $(GO) build -o ../../$@ .
bin/pause: FORCE
	$(GO) build -trimpath -ldflags "-s -w" -o $@ ./hack/pause
bin/watchcache-exporter-image.tar: bin/.watchcache-exporter.sum bin/.image-tool.sum bin/.image-args
	bin/image-tool -o $@ -tag $(IMAGE):$(IMAGE_TAG) \
		-binary bin/watchcache-exporter -path /watchcache-exporter -user 65532:65532 -port 9890/tcp \
		-label org.opencontainers.image.title=watchcache-exporter \
		-label "org.opencontainers.image.description=How long the kube-apiserver's watch cache keeps its history, for Prometheus" \
		-label org.opencontainers.image.source=https://github.com/watchcache/watchcache-exporter \
		-label org.opencontainers.image.version=$(VERSION) -label org.opencontainers.image.revision=$(REVISION)

# The pinned kube-apiserver and etcd, built once per machine into bin/.
kube-bin:
	./hack/kube/build.sh

# What the kind node image holds besides kube-apiserver and etcd: the
# kubelet, kube-controller-manager, kube-scheduler, kube-proxy, containerd,
# runc and the CNI plugins; and Debian's iptables for kube-proxy's image and
# iproute2 for the tests' network namespaces (test/testnetns).
node-bin:
	./hack/debian-package.sh iptables iptables
	./hack/debian-package.sh ip iproute2
	./hack/debian-package.sh pkg-config pkg-config
	./hack/debian-package.sh /usr/include/seccomp.h libseccomp-dev
	./hack/kube/build.sh --node
	./hack/node/build.sh

# The kind node image of the pinned Kubernetes, built here without any
# registry (hack/kind/node-image.sh says what it holds) into podman's image
# store, its name in bin/kind-node-image; rebuilt only when the recipe or a
# pinned version changes. Installs podman and mmdebstrap first (as root).
kind-image: kube-bin node-bin e2e-bin bin/image-tool bin/pause
	./hack/kind/host.sh
	./hack/kube/build.sh --kind
	./hack/kind/bin.sh
	./hack/kind/node-image.sh > bin/kind-node-image.tmp && mv bin/kind-node-image.tmp bin/kind-node-image

# What the end-to-end runs add: a Prometheus built from its module with
# Kubernetes service discovery (Debian's has none), which the kind tests run
# as an image.
e2e-bin:
	./hack/prometheus/build.sh

# Prometheus and promtool from Debian's prometheus package.
prometheus:
	./hack/debian-package.sh prometheus prometheus

# Debian's chromium, for the status page test.
chromium:
	./hack/debian-package.sh chromium chromium

# Rules, PrometheusRule and dashboards from monitoring/ (a test fails on drift).
generate: docs
	$(GO) run ./monitoring/gen

# The flags table and the metrics reference in docs/ from the code (a test
# fails on drift).
docs:
	WATCHCACHE_UPDATE_DOCS=1 $(GO) test -count=1 -run "TestGeneratedDocs|TestChartValuesDocumented" ./test/docs/

demo: kube-bin build
	$(GO) build -o bin/demo ./hack/demo
	./bin/demo $(ARGS)

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# Vet in the flavour the tests build (-race, cgo), so that the packages vet
# compiles are the ones go test then takes from the build cache, instead of a
# second compile of Kubernetes, Helm, kustomize and Prometheus. The versions
# test, which make test does not run, is vetted (so compiled) too.
# hack/lowprio runs the compiler, linker and vet below everything else.
LOWPRIO := -toolexec=$(CURDIR)/hack/lowprio
vet:
	CGO_ENABLED=1 $(GO) vet -race $(LOWPRIO) ./...
	CGO_ENABLED=1 $(GO) vet -race $(LOWPRIO) -tags versions ./test/versions/
	cd hack/image && $(GO) vet ./...

GOTESTSUM := bin/gotestsum
$(GOTESTSUM): hack/gotestsum/go.mod
	cd hack/gotestsum && $(GO) build -o ../../$@ gotest.tools/gotestsum

# The unit tier: every hermetic test. -short skips each test that needs a
# real component (control plane, node, network namespace, Prometheus,
# browser, built image), so it needs Go and gcc only, and no root.
test-unit: $(GOTESTSUM)
	CGO_ENABLED=1 $(GOTESTSUM) --format pkgname-and-test-fails -- -race -short -count=1 ./...
	cd hack/image && CGO_ENABLED=1 $(GO) test -race -count=1 ./...

# Every tier. -race needs cgo. WATCHCACHE_REQUIRE_KUBE=1 turns a missing
# component into a failure instead of a skip. Control planes of all packages
# run side by side, up to the machine's test slots (test/testcluster,
# TakeSlots); -p lets enough test binaries run to fill them, and the packages
# still compiling meanwhile do so at the lowest priority (LOWPRIO). The timeout is
# per package and counts the waits for slots. The JSON of the run is kept in
# bin/test.json; the 15 slowest tests are printed at the end.
TEST_P ?= 6
test: kube-bin node-bin kind-image e2e-bin image prometheus chromium fmt-check vet $(GOTESTSUM)
	CGO_ENABLED=1 WATCHCACHE_REQUIRE_KUBE=1 $(GOTESTSUM) --jsonfile bin/test.json --format pkgname-and-test-fails \
		-- -race $(LOWPRIO) -vet=off -count=1 -p $(TEST_P) -timeout 30m ./... ; rc=$$?; \
	echo "The 15 slowest tests (bin/test.json):"; $(GOTESTSUM) tool slowest --jsonfile bin/test.json --threshold 1ms | head -n 15; \
	(cd hack/image && CGO_ENABLED=1 $(GO) test -race -count=1 ./...) || rc=1; \
	exit $$rc

# The watch cache facts the exporter relies on, checked on kube-apiserver of
# each minor version in hack/kube/versions and on the pinned one (about 5
# minutes each, plus about 7 minutes to build each version the first time;
# docs/compatibility.md has the figures). Not part of make test, for time.
KUBE_VERSIONS ?= $(notdir $(wildcard hack/kube/versions/v*))
test-versions: kube-bin
	for v in $(KUBE_VERSIONS); do ./hack/kube/build.sh --version $$v || exit 1; done
	CGO_ENABLED=1 WATCHCACHE_REQUIRE_KUBE=1 WATCHCACHE_KUBE_VERSIONS="$(KUBE_VERSIONS) ." \
		WATCHCACHE_COMPAT_ROWS=$(CURDIR)/bin/compatibility-rows.md \
		$(GO) test -race -tags versions -count=1 -v -timeout 60m ./test/versions/
	@cat bin/compatibility-rows.md

# The in-cluster tests on a kind cluster of the node image (podman, no
# Docker): deploy/ scraped through Kubernetes service discovery, and the
# operator's path (image load, Helm beside a Prometheus Operator, upgrade,
# uninstall, the kubectl plugin on the cluster's context); also part of make
# test.
e2e: kind-image image
	CGO_ENABLED=1 WATCHCACHE_REQUIRE_KUBE=1 $(GO) test -race -count=1 -v -timeout 30m ./test/kind/ ./test/e2e/

# Load accuracy and cost (against the article's kubectl loops), client-side
# ceiling, footprint, precision, a 30-minute soak and the cost of --resources=all:
# writes docs/benchmarks.md (about an hour; bin/bench -only=resources reruns the last).
bench: kube-bin build
	$(GO) build -o bin/bench ./hack/bench
	./bin/bench

clean:
	rm -rf bin .demo dist
