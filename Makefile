# Two entry points do all setup on a fresh machine: `make demo` runs the product, `make test` tests it.
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: env jars deploy-tools lint test test-native test-unit demo stack-up stack-down clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[flink,dev]"
	touch $@

# The native transform core (Rust, built by maturin into the venv); rebuilt when its sources change.
$(VENV)/.native: $(VENV)/.installed native/Cargo.toml native/pyproject.toml native/llmpipe_native.pyi $(wildcard native/src/*.rs) \
		native/patched-crates.sh $(wildcard native/patches/*/*.patch)
	sh native/patched-crates.sh
	$(PY) -m pip install -q ./native
	touch $@

env: $(VENV)/.installed $(VENV)/.native

jars: env
	$(PY) -m stack jars

# kustomize, kubeconform and the schemas the deployment files are validated against (pinned in
# k8s/versions.yaml; fetched once from the Go module proxy and Maven Central, then reused).
deploy-tools: env
	$(PY) -m scripts.deploy_tools.fetch

lint: env
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy llmpipe stack connector gpu_stage jobs vllm_sim demo replay bench

# Unit tests, then integration tests against a real broker and a PyFlink mini-cluster.
test: env jars deploy-tools lint test-native
	$(PY) scripts/run_pytest.py tests

# The native core's own unit tests (JSON reader, number spelling, created, content rules).
test-native:
	sh native/patched-crates.sh
	cargo test -q --release --manifest-path native/Cargo.toml

test-unit: env deploy-tools
	$(PY) scripts/run_pytest.py tests -m "not integration"

# The product end to end on this machine: broker, simulator (or DEMO_VLLM_URL), connector, gpu_stage,
# one Flink job, then a checked summary. Everything it starts is stopped again.
demo: jars
	$(PY) -m demo

stack-up: jars
	$(PY) -m stack up

stack-down: env
	$(PY) -m stack down

clean:
	rm -rf $(VENV) .stack .pytest_cache .mypy_cache .ruff_cache native/target native/vendor
