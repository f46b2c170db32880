# Sluice: the two commands a newcomer needs are `make run` and `make test`.

GO         ?= go
BIN        := bin/sluice
RACE_BIN   := bin/sluice-race
UNIT_TIMEOUT ?= 4m
E2E_TIMEOUT  ?= 10m
ADDR       ?= 127.0.0.1:8080
FUZZTIME   ?= 30s
BENCHCOUNT ?= 6
BENCHTIME  ?= 1s
# VERSION and COMMIT are stamped into the binary (sluice version,
# sluice_build_info): the nearest tag and the commits since, or the commit
# alone, and the commit; "dev" and none outside a git checkout (Go's own
# record of the commit is used then, unless -buildvcs=false).
VERSION    ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT     ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS    := -X main.version=$(VERSION) -X main.commit=$(COMMIT)

.PHONY: build run test test-ts test-py deps check bench fuzz clean image manifests

## build: compile bin/sluice
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/sluice

## run: build and serve on $(ADDR) with the embedded durable store in
## ./sluice-data and the example configuration
run: build
	./$(BIN) serve --addr $(ADDR) --config examples/sluice.yaml

## image: build the container image (FROM scratch, no container engine: a
## static sluice layered by deploy/image/build.sh with umoci) into the
## OCI layout $(IMAGE_DIR), tagged $(VERSION) and latest, and the
## docker-archive $(IMAGE_ARCHIVE) that `podman load` and `docker load` read
IMAGE_DIR     ?= bin/image
IMAGE_ARCHIVE ?= bin/sluice-image.tar
image:
	GO="$(GO)" VERSION="$(VERSION)" COMMIT="$(COMMIT)" LDFLAGS="$(LDFLAGS)" \
		deploy/image/build.sh $(IMAGE_DIR) $(IMAGE_ARCHIVE)

DYNOXIDE := tools/node_modules/@dynoxide/linux-x64/dynoxide
# APT_LOCK serialises this Makefile's apt-get runs, so that two checkouts
# installing at once (two `make test` side by side) take turns rather than
# one failing on apt's lock.
APT_LOCK := /tmp/sluice-apt.lock

# The TypeScript client, whose devDependencies deps installs.
TS_CLIENT := clients/typescript
TS_DEPS   := $(TS_CLIENT)/node_modules/.package-lock.json

## deps: install everything the tests need: Go modules, the DynamoDB
## emulator (dynoxide, pinned in tools/package-lock.json) from npm, and
## Debian's chromium for the demo page's browser test; Debian's umoci,
## skopeo, podman and runc for the container image's (make image),
## systemd's systemd-analyze for the systemd unit's, and redis-server for
## the Redis store's (store/redisstore); the TypeScript client's
## devDependencies (clients/typescript/package-lock.json) from npm; and
## Debian's python3 for the Python client's tests (make test-py)
DEPLOY_TOOLS := umoci skopeo podman runc systemd-analyze redis-server
DEPLOY_PKGS  := umoci skopeo podman runc systemd redis-server
deps: $(DYNOXIDE) $(TS_DEPS)
	@command -v chromium >/dev/null || flock $(APT_LOCK) sh -c 'command -v chromium >/dev/null || { \
		echo "chromium is missing: installing it from Debian"; \
		apt-get update && apt-get install -y --no-install-recommends chromium; }'
	@(for t in $(DEPLOY_TOOLS); do command -v $$t >/dev/null || exit 1; done) || \
		flock $(APT_LOCK) sh -c 'echo "installing $(DEPLOY_PKGS) from Debian for the image, the unit and the Redis store"; \
		apt-get update && apt-get install -y --no-install-recommends $(DEPLOY_PKGS)'
	@command -v python3 >/dev/null || flock $(APT_LOCK) sh -c 'command -v python3 >/dev/null || { \
		echo "python3 is missing: installing it from Debian for the Python client"; \
		apt-get update && apt-get install -y --no-install-recommends python3; }'
	$(GO) mod download
	cd bench && $(GO) mod download
	cd deploy/kubetest && $(GO) mod download

NPM_ENSURE := command -v npm >/dev/null || flock $(APT_LOCK) sh -c 'command -v npm >/dev/null || { \
		echo "npm is missing: installing nodejs and npm from Debian"; \
		apt-get update && apt-get install -y --no-install-recommends nodejs npm; }'

$(DYNOXIDE): tools/package.json tools/package-lock.json
	@$(NPM_ENSURE)
	cd tools && npm ci --no-audit --no-fund
	@touch $@

# The TypeScript client (clients/typescript): its devDependencies (tsc) as
# its package-lock.json pins them; the package itself depends on nothing.
$(TS_DEPS): $(TS_CLIENT)/package.json $(TS_CLIENT)/package-lock.json
	@$(NPM_ENSURE)
	cd $(TS_CLIENT) && npm ci --no-audit --no-fund
	@touch $@

# TS_TEST runs the client's tests (tsc, then node --test) against the
# sluice binary $(1); missing node, npm or tsc fail it, never skip it.
define TS_TEST
	@command -v node >/dev/null && command -v npm >/dev/null || { echo "test-ts: node and npm are needed: make deps"; exit 1; }
	@test -x $(TS_CLIENT)/node_modules/.bin/tsc || { echo "test-ts: $(TS_CLIENT)/node_modules is missing: make deps"; exit 1; }
	cd $(TS_CLIENT) && SLUICE_BINARY=$(1) npm test
endef

# PY_TEST runs the Python client's unittest tests (clients/python/tests)
# against the sluice binary $(1). A missing python3 fails it under CI=true,
# and elsewhere skips it, saying so (make deps installs it).
define PY_TEST
	@command -v python3 >/dev/null || { \
		if [ "$$CI" = true ]; then echo "test-py: python3 is needed: make deps"; exit 1; fi; \
		echo "test-py: SKIPPED: python3 is missing (make deps installs it)"; exit 0; }; \
		echo "SLUICE_BINARY=$(1) python3 -m unittest discover -s clients/python/tests -v"; \
		SLUICE_BINARY=$(1) python3 -m unittest discover -s clients/python/tests -v
endef

## check: formatting, vet and tidy modules
check:
	@out=$$(gofmt -l . ); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd bench && $(GO) vet ./...
	cd deploy/kubetest && $(GO) vet ./...
	$(GO) mod tidy -diff
	cd bench && $(GO) mod tidy -diff
	cd deploy/kubetest && $(GO) mod tidy -diff

## test: install what the tests need, check, and run every test under -race
## (fuzz seed corpora included; the bench module's benchmarks run once each;
## the Helm chart's test, deploy/kubetest, without -race).
## The end-to-end package (cmd/sluice) runs last and alone, on a race-enabled
## binary built before its clock starts; so is the container image's static
## build compiled before deploy/image's test builds and runs the image (make
## image). The TypeScript client's tests (test-ts), then the Python
## client's (test-py), run after, against the same binary. Each run has a
## bounded timeout, so a hung test fails in minutes, well inside CI's 15.
test: deps check
	$(GO) build -race -ldflags "$(LDFLAGS)" -o $(RACE_BIN) ./cmd/sluice
	CGO_ENABLED=0 $(GO) build -trimpath -o /dev/null ./cmd/sluice
	pkgs=$$($(GO) list ./... | grep -v '/cmd/sluice$$') && test -n "$$pkgs" && \
		$(GO) test -race -shuffle=on -count=1 -timeout $(UNIT_TIMEOUT) $$pkgs
	SLUICE_BINARY=$(CURDIR)/$(RACE_BIN) $(GO) test -race -shuffle=on -count=1 -timeout $(E2E_TIMEOUT) ./cmd/sluice
	cd bench && $(GO) test -count=1 -timeout $(UNIT_TIMEOUT) -run . -bench . -benchtime 1x ./...
	cd deploy/kubetest && SLUICE_BINARY=$(CURDIR)/$(RACE_BIN) $(GO) test -count=1 -timeout $(UNIT_TIMEOUT) ./...
	$(call TS_TEST,$(CURDIR)/$(RACE_BIN))
	$(call PY_TEST,$(CURDIR)/$(RACE_BIN))

## test-ts: the TypeScript client's tests alone, against bin/sluice
test-ts: build $(TS_DEPS)
	$(call TS_TEST,$(CURDIR)/$(BIN))

## test-py: the Python client's tests alone, against bin/sluice
test-py: build
	$(call PY_TEST,$(CURDIR)/$(BIN))

## manifests: render the Helm chart (deploy/helm/sluice) into the plain
## manifests of deploy/manifests, one file per shape; the chart's test
## (deploy/kubetest) fails while they differ
manifests:
	cd deploy/kubetest && $(GO) run ./render

## bench: Sluice's benchmarks and the side-by-side run against its peers;
## results in bench/bench.txt, summarised by benchstat
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 3 ./algo ./engine ./insight ./gateway ./httpapi ./store/...
	cd bench && $(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) -count $(BENCHCOUNT) . | tee bench.txt
	cd bench && $(GO) tool benchstat -col /lib bench.txt

## fuzz: run every fuzz target of the module (the algorithms', the wire
## decoders', the gateway's frames...) for $(FUZZTIME) each
fuzz:
	@for p in $$($(GO) list ./...); do \
		for t in $$($(GO) test $$p -list '^Fuzz' | grep '^Fuzz'); do \
			echo "== $$p $$t"; \
			$(GO) test $$p -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) || exit 1; \
		done; \
	done

clean:
	rm -rf bin
