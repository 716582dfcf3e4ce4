# rankscope: the two commands are `make demo` and `make test`.
# Both create the virtualenv and install the project on first use; services (Kafka from Apache's
# jars, the chDB ClickHouse engine) are provisioned and started by the project itself.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test lint format bench fuzz clean services-up services-down

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/rankscope demo

test: $(STAMP)
	$(PY) -m pytest

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

format: $(STAMP)
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

# The validate stage's fuzz tests, longer than CI runs them, with fresh random records each time.
fuzz: $(STAMP)
	RANKSCOPE_FUZZ_EXAMPLES=$${RANKSCOPE_FUZZ_EXAMPLES:-100000} $(PY) -m pytest tests/test_validate_fuzz.py -p no:randomly -q

bench: $(STAMP)
	$(PY) bench/e2e_throughput.py --json bench/results/e2e_throughput.json

services-up: $(STAMP)
	$(VENV)/bin/rankscope services up

services-down: $(STAMP)
	$(VENV)/bin/rankscope services down

clean:
	rm -rf .rankscope .pytest_cache .mypy_cache .ruff_cache
