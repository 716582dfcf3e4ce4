# rankscope: the two commands are `make demo` and `make test`.
# Both create the virtualenv and install the project on first use; services (Kafka from Apache's
# jars, the chDB ClickHouse engine) are provisioned and started by the project itself.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test lint format bench fuzz clean services-up services-down browser

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[all,dev]'
	@touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/rankscope demo

test: $(STAMP) browser
	$(PY) -m pytest

# Debian's chromium, for the browser test of the report pages (tests/test_report_pages_browser.py).
# Idempotent: nothing happens when $$CHROMIUM or a chromium on PATH is there; the package lists are
# refreshed only when the first install attempt fails (a clean machine may have none).
browser:
	@if [ -n "$$CHROMIUM" ] || command -v chromium >/dev/null 2>&1; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ]; then \
	  echo "make browser: chromium is missing and this is not root: run 'sudo apt-get install -y --no-install-recommends chromium' or set CHROMIUM=/path/to/chromium" >&2; \
	  exit 1; \
	fi; \
	export DEBIAN_FRONTEND=noninteractive; \
	apt-get install -y -q --no-install-recommends chromium \
	  || { apt-get update -q && apt-get install -y -q --no-install-recommends chromium; }

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
