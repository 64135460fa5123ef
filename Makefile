# Everything installs itself: `make serve` and `make test` work on a fresh Debian 12.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_PACKAGES := $(shell grep -hv '^\#' deps/apt.txt)
CONTRACT := tests/contract

.PHONY: install serve test lint typecheck pytest clean

install: system-packages $(VENV)/.installed

# Installs only when something is missing, so a second run costs a dpkg query.
system-packages:
	@dpkg -s $(APT_PACKAGES) >/dev/null 2>&1 || { \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $(APT_PACKAGES); }
	@command -v node >/dev/null && command -v npm >/dev/null || { \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends nodejs npm; }

$(VENV)/.installed: requirements-dev.txt lib/pyproject.toml
	[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements-dev.txt
	touch $@

$(CONTRACT)/node_modules/.installed: $(CONTRACT)/package-lock.json
	cd $(CONTRACT) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

serve: install
	$(BIN)/python -m codeexec.server

lint: $(VENV)/.installed
	$(BIN)/ruff check handlers lib tests

typecheck: $(VENV)/.installed
	$(BIN)/mypy handlers lib/codeexec

# pytest's exit code 5 (nothing collected) is not a failure of the suite.
pytest: install $(CONTRACT)/node_modules/.installed
	$(BIN)/pytest $(PYTEST_ARGS); rc=$$?; [ $$rc -eq 5 ] && rc=0; exit $$rc

test: lint typecheck pytest

clean:
	rm -rf $(VENV) $(CONTRACT)/node_modules .mypy_cache .ruff_cache .pytest_cache .aws-sam
