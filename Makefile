# Two commands on a fresh machine (python3, make and the OS package manager):
#   make demo   creates .venv, installs dpkit, runs `dpkit demo`
#   make test   creates/updates .venv with the dev extras, runs lint, type checks and the tests
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test lint typecheck unit java bench clean

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

# PySpark (the distributed engine) needs a Java runtime: install it from the OS packages if missing.
java:
	@command -v java >/dev/null 2>&1 || { \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq openjdk-17-jre-headless; }

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check src tests benchmarks

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy

unit: $(VENV)/.installed-dev java
	$(BIN)/python -m pytest -q

test: lint typecheck unit

bench: $(VENV)/.installed-dev
	$(BIN)/pip install -q opendp
	$(BIN)/python benchmarks/mechanisms.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
