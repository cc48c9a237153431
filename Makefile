# The two commands: `make run` (the console on one machine) and `make test` (the suite).
VENV := .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
TORCH_VERSION ?= 2.13.0

.PHONY: run test test-tools test-nightly test-deploy test-portable test-distributed test-k8s api-conformance chaos faults venv lint format check bench clean

$(BIN)/.installed: pyproject.toml agents/node/fence/fencewrap.c
	test -x $(PY) || "$$(scripts/find-python)" -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m agents.node.fence  # the workers' fence wrapper (a small static C program)
	touch $@

venv: $(BIN)/.installed

## make run: migrate SQLite, create demo data, start web + loops + a local agent (8 fake H200)
run: venv
	$(PY) manage.py migrate --noinput
	$(PY) manage.py seed_demo
	$(PY) manage.py run_console $(RUN_ARGS)

## make test: the whole suite (PostgreSQL when DATABASE_URL is set, else SQLite). First sets
## up what the suite needs of the machine when it is missing, as `.ci/run` does
## (scripts/test-tools: Chromium, a C compiler, podman and its test image; apt-get as root,
## otherwise it prints the command to run)
test: test-tools
	@$(MAKE) --no-print-directory venv
	$(BIN)/pytest $(PYTEST_ARGS)

test-tools:
	scripts/test-tools

## make test-nightly: the property tests of the sharing rules with thousands of examples
## (SHARING_PROPERTY_EXAMPLES=5000: 20,000 plans and 2,500 simulations; docs/scheduling.md)
test-nightly: venv
	SHARING_PROPERTY_EXAMPLES=$${SHARING_PROPERTY_EXAMPLES:-5000} $(BIN)/pytest -q -p no:randomly \
		tests/scheduler/test_sharing_properties.py

## make api-conformance: Schemathesis against the real console (a fresh SQLite console, a
## simulated agent, rate limits raised), a few minutes; 0 server errors and 0 conformance
## failures, reports in var/artifacts/schemathesis/ (scripts/api_conformance.py)
api-conformance: venv
	$(PY) scripts/api_conformance.py $(CONFORMANCE_ARGS)

## make test-deploy: build the images (Debian base made here), bring the compose stack up
## on podman, run jobs through it, restart, back up and restore, tear it all down
## (installs podman, runc, busybox-static and mmdebstrap first when missing: scripts/deploy-tools)
test-deploy: venv
	scripts/deploy-tools
	DEPLOY_TEST=1 $(BIN)/pytest tests/deploy -p no:randomly -v -s --durations=0 $(PYTEST_ARGS)

## make test-portable: the production stack carried to a bare machine (scripts/portable-stack:
## PostgreSQL, Redis and the wheels in one tarball, packed once per pyproject.toml and script,
## cached), started on ports of its own under a Python without the project's packages, a
## small fleet run on it (tests/portable)
PORTABLE_BUNDLE ?= $(HOME)/.cache/gpu-console/portable-stack-$(shell cat pyproject.toml scripts/portable-stack | sha256sum | cut -c1-12).tar.xz
test-portable: venv
	@test -s $(PORTABLE_BUNDLE) || { mkdir -p $(dir $(PORTABLE_BUNDLE)) && \
		scripts/portable-stack pack $(PORTABLE_BUNDLE).part && mv $(PORTABLE_BUNDLE).part $(PORTABLE_BUNDLE); }
	PORTABLE_TEST=1 PORTABLE_BUNDLE=$(PORTABLE_BUNDLE) $(BIN)/pytest tests/portable -p no:randomly -v $(PYTEST_ARGS)

## make test-distributed: a real torch.distributed (gloo, CPU) job across two agents, before
## and after a fault-tolerance restart, and a real mpirun job across them (tests/distributed).
## Torch goes into its own venv, .venv-torch, used only by the workers' program; the console
## and agents run from .venv; Open MPI from Debian (scripts/mpi-tools)
test-distributed: venv
	scripts/mpi-tools
	@test -x .venv-torch/bin/python || python3.11 -m venv .venv-torch
	@.venv-torch/bin/python -c "import torch" 2>/dev/null || \
		.venv-torch/bin/pip install torch==$(TORCH_VERSION)
	DISTRIBUTED_TEST=1 $(BIN)/pytest tests/distributed -p no:randomly -v -s $(PYTEST_ARGS)

## make test-k8s: the Kubernetes backend against a real kube-apiserver and etcd
## (scripts/kube-build builds kube-apiserver 1.20.2 once into a cache outside the clone and
## installs etcd; the tests fail, never skip, when the server cannot start)
test-k8s: venv
	@bin="$$(scripts/kube-build | tail -n1)" && test -x "$$bin" && \
	KUBE_APISERVER="$$bin" $(BIN)/pytest tests/k8s tests/kube -p no:randomly -v $(PYTEST_ARGS)

## make chaos: the fault tests (tests/faults: real processes, agents and consoles) and the
## suite's figures: faults injected and survived, log lines lost or duplicated, live copies
## per rank
chaos: venv
	$(BIN)/pytest tests/faults -p no:randomly -v $(PYTEST_ARGS)

## make faults: the console on PostgreSQL under a small concurrent load while its database
## backends are killed; prints the 5xx count (goal 0). Needs DATABASE_URL naming a
## PostgreSQL database of its own (scripts/faults/db_backend_kill.py), about a minute
faults: venv
	$(PY) scripts/faults/db_backend_kill.py $(FAULTS_ARGS)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: venv
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

## make bench: the benchmark suite, quick variant (FULL=1: the full sizes); bench/results.json
bench: venv
	$(PY) bench/run.py $(if $(FULL),--full) $(BENCH_ARGS)

clean:
	rm -rf $(VENV) var .pytest_cache .ruff_cache
