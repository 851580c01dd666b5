# The two commands a newcomer runs: `make up` (playground) and `make test` (everything).
# Each does its own setup: Python env, binaries (built from the Go module proxy), services.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
NODES ?= 4
REAL_NODES ?= 0

.PHONY: up down test test-fast unit bins node-packages images env lint clean help conformance

help:
	@echo "make up      start etcd + vc-apiserver on loopback, write .local/kubeconfig"
	@echo "make down    stop what make up started"
	@echo "make test    build everything needed and run the whole test suite"
	@echo "make test-fast  unit + integration (real etcd), the inner loop"
	@echo "make bins    build etcd, etcdctl, etcdutl, kube-apiserver, kube-controller-manager, kube-scheduler,"
	@echo "             kubectl, kwok, kubelet, kube-proxy, coredns"
	@echo "make images  build the container images (hack/images), print their sizes and build times"
	@echo "make lint    ruff"
	@echo "make conformance  Kubernetes' conformance suite against the host and two tenants (docs/conformance.md)"

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

env: $(STAMP)

bins:
	bash hack/build-bins.sh

# Debian's containerd, runc, CNI plugins, iptables, conntrack, socat, busybox-static, gcc (root; fast when present)
node-packages:
	bash hack/node-packages.sh

images: env bins node-packages
	$(PY) -m hack.images build

up: env bins
	@if [ "$(REAL_NODES)" != "0" ]; then $(MAKE) --no-print-directory node-packages; fi
	@ln -sf $(abspath $(VENV))/bin/kubectl-vc .local/bin/kubectl-vc  # `kubectl vc`, beside kubectl on the README's PATH
	$(PY) -m hack.playground up --nodes $(NODES) --real-nodes $(REAL_NODES)

down: env
	$(PY) -m hack.playground down

lint: env
	$(VENV)/bin/ruff check apiserver reconciler apiservice certs hack bench tests

# Three workers (tests/conftest.py keeps a file, or a lab shared by files, on one worker); every run
# writes each test's time to .local/test-durations.txt.
TEST_WORKERS ?= 3
test: env bins node-packages lint
	$(PY) -m pytest -p no:cacheprovider -q --durations=20 -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder tests

# Kubernetes' own [Conformance] suite against the host, a dedicated tenant and a slice tenant on the
# real-node lab (root); docs/conformance.md from the JUnit files. CONFORMANCE_ARGS="--smoke" for the
# short subset make test runs, "--targets dedicated --focus 'sig-network.*Conformance'" for a part.
conformance: env bins node-packages
	$(PY) -m hack.conformance run $(CONFORMANCE_ARGS)

# The inner loop: the pure-logic specs and the etcd-backed integration tests, in a minute or two.
test-fast: env bins
	$(PY) -m pytest -p no:cacheprovider -q -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder tests/unit tests/integration

unit: env
	$(PY) -m pytest -q tests/unit

clean: down
	rm -rf .local/data .local/run .local/log .local/host .local/tenants .local/serving .local/encryption.key

# Side-by-side benchmarks against kube-apiserver serving the same resource as a CRD (docs/benchmarks.md).
# BENCH_ARGS="--scale 0.02" for a smoke run; results in bench/results/latest.json.
BENCH_STAMP := $(VENV)/.bench-installed

$(BENCH_STAMP): pyproject.toml $(STAMP)
	$(PY) -m pip install --quiet -e '.[bench]'
	@touch $(BENCH_STAMP)

# docs/metering.png and docs/metering.json, from a short run of two tenants on the playground.
.PHONY: metering-chart
metering-chart: env bins $(BENCH_STAMP)
	$(PY) -m hack.meteringchart

.PHONY: bench
bench: env bins node-packages $(BENCH_STAMP)
	$(PY) -m bench $(BENCH_ARGS)

# Faults survived, at length: tests/e2e/test_faults_*.py and test_chaos.py with more rounds and longer outages
# (VC_SOAK=1: 30 seeded vc-apiserver kills; VC_CHAOS_SEED=n replays another schedule).
.PHONY: soak
soak: env bins
	VC_SOAK=1 $(PY) -m pytest -p no:cacheprovider -q -s --durations=0 tests/e2e/test_faults_*.py tests/e2e/test_chaos.py
