# skiff — make help lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

# The patched toolchain every target builds and tests with: go1.26.8 (the machines' Go)
# has known standard-library vulnerabilities reachable from skiff (net/http, crypto/tls,
# crypto/x509). The go command fetches it from the module proxy once (about 76 MB).
# Exported, so the go commands of every recipe and the tests' own go builds use it.
# go.mod's go line and internal/gotoolchain refuse an older Go outside the Makefile too
# (`make GOTOOLCHAIN=local ...` with go1.26.8 stops, saying which Go to use).
GOTOOLCHAIN ?= go1.27.3
export GOTOOLCHAIN

GOARCH ?= arm64
GOBIN_DIR := $(shell go env GOPATH)/bin
export PATH := $(GOBIN_DIR):$(PATH)
FUNCTIONS := $(notdir $(wildcard functions/*))
LDFLAGS := -s -w -buildid=
RIE_VERSION := v0.0.0-20261030222936-bef5c4ba774d
IMDS_MOCK_VERSION := v1.13.0
GOAWS_VERSION := v0.5.4
GOVULNCHECK_VERSION := v1.9.0
# staticcheck 2026.2.2 (its module's v0.8.2), run by make lint through go run: built once
# from the module proxy, then from the build cache.
STATICCHECK_VERSION := v0.8.2
# The Go vulnerability database as a module (golang.org/x/vulndb) from the module proxy:
# latest by default, since its point is fresh data; pin a pseudo-version to reproduce a run.
VULNDB_VERSION ?= latest
VULNDB_CACHE := $(CURDIR)/build/vulndb

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-10s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: deps
deps: ## install what the tests need: npm packages, emulators, shellcheck, Slurm, kube-apiserver and etcd; check moto
	npm ci --no-audit --no-fund
	go install github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@$(RIE_VERSION)
	go install github.com/aws/amazon-ec2-metadata-mock/cmd/ec2-metadata-mock@$(IMDS_MOCK_VERSION)
	@# goaws installs as "cmd"; the tests look for it as goaws
	GOBIN=$(GOBIN_DIR) go install github.com/Admiral-Piett/goaws/app/cmd@$(GOAWS_VERSION) && mv -f $(GOBIN_DIR)/cmd $(GOBIN_DIR)/goaws
	@command -v shellcheck >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq shellcheck; }
	@# the process provider runs each runner in a bubblewrap sandbox (the hostile-job tests need it)
	@command -v bwrap >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap; }
	@# the metrics HTML report is checked in a real headless browser
	@command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }
	@# the Slurm provider's tests start a single-node cluster of their own (slurmctld, slurmd, munged;
	@# slurmdbd over a MariaDB server of its own for the accounting tests)
	@command -v slurmctld >/dev/null && command -v munged >/dev/null && command -v slurmdbd >/dev/null && command -v mariadbd >/dev/null || \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge slurmdbd mariadb-server; }
	@# the Slurm provider submits as the pools' run-as accounts through sudo; its tests run sudo and visudo
	@command -v sudo >/dev/null && command -v visudo >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq sudo; }
	@# the container provider's tests start Podman's Docker-compatible service of their own (runc: crun refuses hybrid cgroups)
	@command -v podman >/dev/null && command -v runc >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc; }
	@# moto (DynamoDB with transactions, CloudWatch, EC2) is a Python package, preinstalled on these machines: say how, do not install
	@python3 -c "import moto.server" 2>/dev/null || echo 'moto is missing (the ledger, fleet, metrics and ec2events tests need it): pip install "moto[server]==5.2.1"' >&2
	@# the Kubernetes provider's tests run a real kube-apiserver and etcd, built once (about 5 minutes and 2.5 GB)
	./scripts/build-kube-test-servers.sh

.PHONY: build
build: ## one stripped bootstrap per function under build/<function>/ (GOARCH=arm64 by default)
	@for f in $(FUNCTIONS); do \
		echo "build/$$f/bootstrap ($(GOARCH))"; \
		CGO_ENABLED=0 GOOS=linux GOARCH=$(GOARCH) go build -trimpath -tags lambda.norpc \
			-ldflags '$(LDFLAGS)' -o build/$$f/bootstrap ./functions/$$f || exit 1; \
	done

.PHONY: test
test: deps lint build ## install test tools, lint, build the functions, then run every test and every benchmark once (emulators are started by the tests)
	@# build first: one arm64 compile of the functions' dependencies, which the functions' tests then find
	@# in the build cache, instead of five packages compiling them at once for their bootstrap tests.
	@# -bench . -benchtime 1x: each benchmark runs once after its package's tests, no figure asserted,
	@# so that a benchmark that breaks fails the suite (make bench measures).
	SKIFF_REQUIRE_EMULATORS=1 go test -count=1 -timeout 15m -bench . -benchtime 1x ./...
	@# then again under the race detector, every package whose code under test runs in the test
	@# binary: all but the functions' and the CDK app's (which run in the Lambda emulator's and
	@# node's processes). A race is rare to see; each CI run is one more look.
	SKIFF_REQUIRE_EMULATORS=1 go test -race -count=1 -timeout 15m $$(go list ./... | grep -vE '$(RACE_SKIP)')

# Packages make test does not run under -race (make race runs every package).
RACE_SKIP := /skiff/functions/|/skiff/infra(/|$$)

# Decision packages and the port types they share: no SDK, no network code.
DECISIONS := ./pkg/pool ./pkg/pool/poolfile ./pkg/provider/ec2/ec2prices ./pkg/scaleup/decide ./pkg/ledger ./pkg/names ./pkg/provider ./pkg/userdata ./pkg/metrics ./pkg/metrics/writer ./pkg/scaledown/decide ./pkg/runnerversion ./pkg/allow
# Services see only ports: their AWS adapters live in packages of their own
# (pkg/queue/sqsqueue, pkg/store/dynamostore, pkg/metrics/cwpeaks, ...).
SERVICES := ./pkg/webhook ./pkg/scaleup ./pkg/scaledown ./pkg/instanceevents ./pkg/room ./pkg/setup ./pkg/metrics ./pkg/metrics/writer ./pkg/freshness

.PHONY: lint
lint: ## gofmt, go vet, staticcheck, shellcheck, files of at most 900 lines, and the dependency checks (decisions, services and ghsim free of SDKs)
	@out=$$(git ls-files '*.go' | xargs -r gofmt -l); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet ./...
	@# staticcheck's default checks; a finding that is meant carries a //lint:ignore with its reason
	go run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	@# no Go file over 900 lines: a longer one is two things, or a table that belongs in testdata/
	@out=$$(git ls-files '*.go' | xargs -r wc -l | awk '$$2 != "total" && $$1 > 900 {print "  " $$2 ": " $$1 " lines"}'); \
		if [ -n "$$out" ]; then echo "Go files over 900 lines (split them):"; echo "$$out"; exit 1; fi
	@# an older Go (the machine's own, GOTOOLCHAIN=local) must fail to build skiff, saying which Go to use
	go test -count=1 ./internal/gotoolchain
	@out=$$(go list -deps ./pkg/github/ghsim | grep -E 'skiff/pkg/webhook|aws-sdk-go-v2'); if [ -n "$$out" ]; then echo "pkg/github/ghsim must not import:"; echo "$$out"; exit 1; fi
	@# every backend lives under pkg/provider/ (each asserts var _ provider.Provider = ...)
	@out=$$(git grep -l 'provider\.Provider = ' -- '*.go' ':!*_test.go' ':!pkg/provider/*'); if [ -n "$$out" ]; then echo "backends belong under pkg/provider/:"; echo "$$out"; exit 1; fi
	@# the operator's CLI links no simulator: the demo is a command of its own (cmd/skiff-demo)
	@out=$$(go list -deps ./cmd/skiff | grep -E 'skiff/pkg/github/ghsim$$|skiff/internal/loadtest$$'); if [ -n "$$out" ]; then echo "cmd/skiff must not import:"; echo "$$out"; exit 1; fi
	git ls-files '*.sh' 'userdata/*' '.ci/*' | xargs -r grep -lE '^#!.*(ba)?sh' | xargs -r shellcheck
	@# client-go is the Kubernetes provider's alone: the Lambdas must not link it
	@for f in $(FUNCTIONS); do \
		leak=$$(go list -deps ./functions/$$f | grep -E '^k8s\.io/' | head -3 | tr '\n' ' '); \
		if [ -n "$$leak" ]; then echo "functions/$$f depends on $$leak(only the Kubernetes provider and skiff local use client-go)"; exit 1; fi; \
	done; echo "functions: no client-go"
	@# SQLite and the local providers are skiff local's (internal/local): the Lambdas must not link them
	@for f in $(FUNCTIONS); do \
		leak=$$(go list -deps ./functions/$$f | grep -E '^modernc\.org/sqlite$$|/internal/local$$' | head -3 | tr '\n' ' '); \
		if [ -n "$$leak" ]; then echo "functions/$$f depends on $$leak(only skiff local uses SQLite: internal/local)"; exit 1; fi; \
	done; echo "functions: no SQLite"
	@for p in $(DECISIONS); do \
		leak=$$(go list -deps $$p | grep -E 'aws-sdk-go-v2|^net/http$$' | head -3 | tr '\n' ' '); \
		if [ -n "$$leak" ]; then echo "$$p depends on $$leak(decisions import no SDK and no net/http)"; exit 1; fi; \
	done; echo "decision packages: no SDK, no net/http"
	@for p in $(SERVICES); do \
		leak=$$(go list -deps $$p | grep -E 'aws-sdk-go-v2' | head -3 | tr '\n' ' '); \
		if [ -n "$$leak" ]; then echo "$$p depends on $$leak(services import no AWS SDK: put the adapter in a package of its own)"; exit 1; fi; \
	done; echo "service packages: no AWS SDK"

# make synth: the default stack against the example pools file, offline (no
# AWS credentials, no lookups). Override SYNTH_CONTEXT for your own values.
SYNTH_CONTEXT ?= -c pools=examples/pools.yaml -c allow=acme -c vpcId=vpc-0123456789abcdef0
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20

.PHONY: synth
synth: build ## synthesize the CDK stack (cdk.out/) with cdk-nag, against examples/pools.yaml
	@test -x node_modules/.bin/cdk || npm ci --no-audit --no-fund
	npx cdk synth --quiet --no-notices --no-version-reporting $(SYNTH_CONTEXT)

.PHONY: bench
bench: ## run the benchmarks docs/performance.md quotes
	go test -run '^$$' -bench . -benchmem -count 1 ./...
	go build -o build/skiff-standin ./cmd/skiff-standin
	go build -o build/skiff-demo ./cmd/skiff-demo
	build/skiff-demo -f examples/lab.yaml --standin build/skiff-standin --jobs 1000 --limit 100 --out build/demo-1000

# make race: the suite's test binaries under the race detector, and the skiff that cmd/skiff's
# tests start (docs/development.md). About 10 minutes on a 2-core machine.
.PHONY: race
race: deps build ## run every test under the race detector (emulators are started by the tests)
	SKIFF_REQUIRE_EMULATORS=1 go test -race -count=1 -timeout 30m ./...

# make loadtest: the fault harness (internal/loadtest) with LOADTEST_JOBS jobs in both
# configurations (metrics records off, then on; each about 5 minutes on moto), the DynamoDB
# adapters through the SDK against moto (LOADTEST_STORE=memory for the in-memory adapters).
# SKIFF_SEED=<n> reruns a seed.
LOADTEST_JOBS ?= 1000
LOADTEST_STORE ?= moto

.PHONY: loadtest
loadtest: ## the fault harness: 1,000 jobs through the whole pipeline under faults, the store on moto
	SKIFF_LOADTEST_JOBS=$(LOADTEST_JOBS) SKIFF_LOADTEST_STORE=$(LOADTEST_STORE) go test -count=1 -timeout 60m -v -run '^TestLoad$$' ./internal/loadtest

# make fuzz: every `func Fuzz...` in a tracked _test.go, found with git grep so
# that a new target cannot be left out, each for FUZZTIME. FUZZFLAGS adds go test
# flags, e.g. FUZZFLAGS=-parallel=1 to fuzz on one core beside other work, or
# -fuzzminimizetime=1000x: go test spends up to 60 s minimizing each input that
# finds new coverage, and its execs count stands still meanwhile (FuzzHandler's
# inputs are GitHub's payloads of about 10 KB, slow to minimize). FUZZ=<regexp>
# runs only the targets whose names match. Every target runs even after one
# fails; the summary gives each one's executions.
FUZZTIME ?= 30s
FUZZFLAGS ?=
FUZZ ?= .

.PHONY: fuzz
fuzz: ## run every fuzz target for FUZZTIME each (default 30s); FUZZFLAGS=-parallel=1 uses one core; FUZZ=<regexp> picks targets
	@set -uo pipefail; \
	targets=$$(git grep -E '^func Fuzz[A-Za-z0-9_]*\(' -- '*_test.go' | \
		sed -E 's#^(([^:]*)/)?[^/:]*:func (Fuzz[A-Za-z0-9_]*)\(.*#./\2 \3#' | sort -u | \
		awk -v re='$(FUZZ)' '$$2 ~ re'); \
	if [ -z "$$targets" ]; then echo "fuzz: no fuzz targets match FUZZ=$(FUZZ)" >&2; exit 1; fi; \
	log=$$(mktemp); trap 'rm -f "$$log"' EXIT; summary=""; failed=""; \
	while read -r dir name; do \
		echo "fuzz: $$name in $$dir for $(FUZZTIME)"; \
		go test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $(FUZZFLAGS) "$$dir" 2>&1 | tee "$$log"; \
		rc=$${PIPESTATUS[0]}; \
		execs=$$(grep -oE 'execs: [0-9]+' "$$log" | tail -1 | cut -d' ' -f2); \
		if [ "$$rc" -ne 0 ]; then failed="$$failed $$name"; status=FAIL; else status=ok; fi; \
		summary="$$summary$$(printf '%-24s %-16s %-4s execs %s' "$$name" "$$dir" "$$status" "$${execs:-?}")"$$'\n'; \
	done <<<"$$targets"; \
	printf '\nfuzz summary (FUZZTIME=%s):\n%s' '$(FUZZTIME)' "$$summary"; \
	if [ -n "$$failed" ]; then echo "fuzz: failed:$$failed" >&2; exit 1; fi

.PHONY: vulncheck
vulncheck: ## govulncheck against an offline Go vulnerability database built from golang.org/x/vulndb
	go install golang.org/x/vuln/cmd/govulncheck@$(GOVULNCHECK_VERSION)
	@# vuln.go.dev is not reachable here; the module proxy serves golang.org/x/vulndb, whose
	@# data/osv/ holds every report as OSV JSON. Its cmd/indexdb writes them in the v1
	@# layout govulncheck's -db file:// reads (index/db.json, index/modules.json, ID/*.json).
	@# One database per vulndb version, built once into build/vulndb/<version>/.
	@set -euo pipefail; \
	info=$$(cd / && go mod download -json golang.org/x/vulndb@$(VULNDB_VERSION)); \
	version=$$(sed -n 's/^[[:space:]]*"Version": "\(.*\)",$$/\1/p' <<<"$$info"); \
	dir=$$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p' <<<"$$info"); \
	if [ -z "$$version" ] || [ ! -d "$$dir/data/osv" ]; then echo "vulncheck: no golang.org/x/vulndb data: $$info" >&2; exit 1; fi; \
	db=$(VULNDB_CACHE)/$$version; \
	if [ ! -f "$$db/index/db.json" ]; then \
		echo "building the vulnerability database golang.org/x/vulndb@$$version into $$db"; \
		rm -rf "$$db.tmp"; mkdir -p $(VULNDB_CACHE); \
		(cd / && go run golang.org/x/vulndb/cmd/indexdb@$$version -vulns "$$dir/data/osv" -out "$$db.tmp"); \
		mv "$$db.tmp" "$$db"; \
	fi; \
	echo "govulncheck $(GOVULNCHECK_VERSION), $$(go version | cut -d' ' -f3), database golang.org/x/vulndb@$$version"; \
	govulncheck -db "file://$$db" ./...

.PHONY: demo
demo: ## the whole pipeline on this machine: skiff local against a GitHub simulator, stand-in runners, a burst of jobs
	go build -o build/skiff-standin ./cmd/skiff-standin
	go run ./cmd/skiff validate -f examples/lab.yaml
	go run ./cmd/skiff-demo -f examples/lab.yaml --standin build/skiff-standin

.PHONY: demo-container
demo-container: ## make demo with each runner a container on a Podman service the demo starts (needs podman and runc)
	go run ./cmd/skiff validate -f examples/lab.yaml
	go run ./cmd/skiff-demo -f examples/lab.yaml --provider container

.PHONY: verify
verify: ## fail when go mod tidy or the vendored fixtures would change the tree
	go mod tidy
	./scripts/refresh-webhook-examples.sh >/dev/null
	@git diff --exit-code -- go.mod go.sum testdata || { echo "tree is dirty after tidy/refresh"; exit 1; }

.PHONY: clean
clean: ## remove build output
	rm -rf build
