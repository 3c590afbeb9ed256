# tidelake — every target does its own set-up (idempotent). `make help` lists them.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
TL := $(VENV)/bin/tidelake
PYTEST_ARGS ?=
# make test shares the suite between this many pytest-xdist workers (tests/conftest.py); 0 = one process
TEST_WORKERS ?= 2

.DEFAULT_GOAL := help

.PHONY: help
help: ## List every target with its one-line description
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}'

.PHONY: setup
setup: ## Set up what the demo needs: .venv, Hudi jar, nats-server, dashboard (idempotent)
	@scripts/setup

.PHONY: setup-tests
setup-tests: export TIDELAKE_SETUP_TESTS := 1
setup-tests: ## setup plus what only the suite needs: databases, FUSE, MinIO, actionlint, promtool, S3A jars
	@scripts/setup

.PHONY: demo
demo: setup ## Run the whole pipeline end to end on embedded defaults and verify the lake
	$(TL) demo

.PHONY: dashboard
dashboard: ## Build the Astro dashboard into src/tidelake/api/static/ (locked npm packages, astro build)
	@scripts/dashboard --force

.PHONY: demo-mariadb
demo-mariadb: export TIDELAKE_SETUP_DATABASES := 1
demo-mariadb: setup ## The demo against a private MariaDB: SQL workload, binlog capture, verify
	$(TL) demo --source mariadb

.PHONY: demo-postgres
demo-postgres: export TIDELAKE_SETUP_DATABASES := 1
demo-postgres: setup ## The demo against a private PostgreSQL: SQL workload, pgoutput capture, verify
	$(TL) demo --source postgres

.PHONY: test
test: export SETUP_CHROMIUM := 1
test: export TIDELAKE_SETUP_TESTS := 1
test: setup ## Run the test suite (unit, integration on real services, e2e short forms)
	$(PY) -m pytest -m "not long" -n $(TEST_WORKERS) --dist loadscope --durations=25 $(PYTEST_ARGS); rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; exit 1; fi; exit $$rc

.PHONY: e2e
e2e: export TIDELAKE_SETUP_TESTS := 1
e2e: setup ## Long forms of the end-to-end tests (marked long; e.g. a 1M-row incremental snapshot under load with kill -9)
	$(PY) -m pytest -m long --durations=25 $(PYTEST_ARGS); rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; exit 1; fi; exit $$rc

CHAOS_SEED ?= 1
CHAOS_EVENTS ?= 30000
CHAOS_RATE ?= 50
CHAOS_SOURCE ?= mariadb
CHAOS_STAGE_STORE ?= s3
CHAOS_MIN_FAULTS ?= 100
.PHONY: chaos
chaos: export TIDELAKE_SETUP_TESTS := 1
chaos: setup ## Long fault run (root): >= 100 faults of 7 kinds (kill -9, SIGSTOP, bus down, disk full, MinIO down/slow, restart storms) over every process; JSON last
	$(TL) chaos --source $(CHAOS_SOURCE) --stage-store $(CHAOS_STAGE_STORE) --seed $(CHAOS_SEED) --events $(CHAOS_EVENTS) --rate $(CHAOS_RATE) --min-faults $(CHAOS_MIN_FAULTS) --json

.PHONY: unit
unit: export TIDELAKE_SETUP_TESTS := 1
unit: setup ## Run the unit tests only (fast, no services)
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

.PHONY: bench
bench: setup ## Benchmarks side by side (nats bench, HoodieStreamer, Hudi, Parquet); BENCH_ARGS=--quick
	@bench/setup
	$(TL) bench $(BENCH_ARGS) --docs docs/benchmarks.md

.PHONY: lint
lint: setup ## ruff and mypy (strict)
	$(VENV)/bin/ruff check src tests bench tools
	$(VENV)/bin/ruff format --check src tests bench tools
	$(VENV)/bin/mypy

.PHONY: fmt
fmt: setup ## Format the code with ruff
	$(VENV)/bin/ruff format src tests bench tools
	$(VENV)/bin/ruff check --fix src tests bench tools

.PHONY: wheel
wheel: ## Build dist/tidelake-<version>-py3-none-any.whl (with the built dashboard)
	@scripts/dashboard
	rm -rf build/lib build/bdist.*
	$(PY) -m pip wheel --no-deps -w dist .

.PHONY: constraints
constraints: ## Refresh constraints.txt: every dependency of tidelake[all] pinned (uv pip compile)
	$(VENV)/bin/uv pip compile pyproject.toml --extra all --python-version 3.11 \
		--universal --no-header --annotation-style line -o constraints.txt --quiet
	@sed -i '1i # Pinned versions of every dependency of tidelake[all] (`make constraints`; uv pip compile).\n# Reproducible installs and images: pip install -c constraints.txt "tidelake[spark]"' constraints.txt

.PHONY: clean
clean: ## Remove the demo's data directory (<home>/demo; home: $TIDELAKE_HOME, else $XDG_DATA_HOME/tidelake, else ~/.local/share/tidelake)
	@home="$${TIDELAKE_HOME:-$${XDG_DATA_HOME:-$$HOME/.local/share}/tidelake}"; \
		echo "rm -rf $$home/demo"; rm -rf "$$home/demo" .tidelake
