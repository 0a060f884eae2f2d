# Two commands on a fresh machine (python3, make and the OS package manager):
#   make demo   creates .venv, installs dpkit, runs `dpkit demo`
#   make test   creates/updates .venv with the dev extras, runs lint, type checks and the tests
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo serve test lint typecheck unit java browser postgres scanners bench audit figures clean

$(BIN)/python:
	@$(PYTHON) -m venv $(VENV) 2>/dev/null || { \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq python3-venv && $(PYTHON) -m venv $(VENV); }
	@$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	@touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e ".[dev]"
	@touch $@ $(VENV)/.installed

demo: $(VENV)/.installed
	$(BIN)/dpkit demo

# The query service on the demo table (keys are printed; data, store and keys in .dpkit-demo/).
serve: $(VENV)/.installed
	$(BIN)/dpkit serve --demo

# PySpark (the distributed engine) needs a Java runtime: install it from the OS packages if missing.
java:
	@command -v java >/dev/null 2>&1 || { \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq openjdk-17-jre-headless; }

# The web page's browser tests (tests/service/test_web.py) drive Debian's Chromium through
# Playwright (no Playwright browser download): install it from the OS packages if missing.
browser:
	@[ -x /usr/bin/chromium ] || { \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq chromium; }

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check src tests benchmarks

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy

# Two workers (the machine's two cores); a test file stays on one worker. The load tests
# (several servers and 100 client threads each) run on their own afterwards.
unit: $(VENV)/.installed-dev java browser postgres
	DPKIT_REQUIRE_BROWSER=1 DPKIT_REQUIRE_POSTGRES=1 $(BIN)/python -m pytest -q -n 2 --dist loadfile \
	  --ignore=tests/service/test_load.py
	DPKIT_REQUIRE_POSTGRES=1 $(BIN)/python -m pytest -q tests/service/test_load.py

test: lint typecheck scanners unit

# The real SQLite/PostgreSQL scanner path of Session.from_sql. The extension binaries come from
# PyPI's duckdb-ext-* packages, built for DuckDB 1.4.4 only, so they go with duckdb==1.4.4 into
# .duckdb-1.4/, which shadows the venv's DuckDB for this one pytest run (--no-deps: DuckDB needs
# nothing else). The tests start a throwaway PostgreSQL server (Debian's postgresql package);
# DPKIT_REQUIRE_SCANNERS=1 turns their skips into failures.
DUCKDB14 := .duckdb-1.4

$(DUCKDB14)/.installed: | $(BIN)/python
	rm -rf $(DUCKDB14)
	$(BIN)/pip install -q --no-deps --target $(DUCKDB14) \
	  duckdb==1.4.4 'duckdb-ext==0.1.*' 'duckdb-ext-sqlite==1.4.4.*' 'duckdb-ext-postgres==1.4.4.*'
	@touch $@

postgres:
	@command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq postgresql; }

scanners: $(VENV)/.installed-dev $(DUCKDB14)/.installed postgres
	DPKIT_REQUIRE_SCANNERS=1 PYTHONPATH=$(DUCKDB14) $(BIN)/python -m pytest -q tests/tables/test_sql_scanners.py

# The full statistical privacy audits (tests marked audit; about 15 minutes on 2 cores, not
# part of make test, whose fast subset runs in seconds). -v names each audit as it starts and
# shows how far along the run is ([ 40%]); tee-sys shows what audits print (the measured ε
# lower bounds) as they run, which -s would too but without the [ 40%]; --durations lists how
# long each audit took at the end.
audit: $(VENV)/.installed-dev java
	$(BIN)/python -m pytest -v --capture=tee-sys -m audit --durations=0 --durations-min=1 tests

# The README's and docs' pictures (docs/img/), redrawn from seeded, generated data.
figures: $(VENV)/.installed
	$(BIN)/python docs/figures/make_figures.py

bench: $(VENV)/.installed-dev
	$(BIN)/pip install -q opendp
	$(BIN)/python benchmarks/mechanisms.py

clean:
	rm -rf $(VENV) $(DUCKDB14) .pytest_cache .mypy_cache .ruff_cache .hypothesis
