# Everything installs itself: `make serve` and `make test` work on a fresh Debian 12.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_PACKAGES := $(shell grep -hv '^\#' deps/apt.txt)
CONTRACT := tests/contract
CONTRACT_G2 := tests/contract_g2

.PHONY: install serve test lint typecheck pytest clean

install: system-packages npm-global $(VENV)/.installed

# Installs only when something is missing, so a second run costs a dpkg query.
system-packages:
	@dpkg -s $(APT_PACKAGES) >/dev/null 2>&1 || { \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $(APT_PACKAGES); }
	@command -v node >/dev/null && command -v npm >/dev/null || { \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends nodejs npm; }

# TypeScript's compiler in the sandbox: esbuild under /usr/local, which the sandbox sees (in /usr).
ESBUILD_VERSION := 0.28.0
npm-global: system-packages
	@[ "$$(/usr/local/bin/esbuild --version 2>/dev/null)" = $(ESBUILD_VERSION) ] || \
	  $(SUDO) npm install -g --prefix /usr/local --no-audit --no-fund --loglevel=error esbuild@$(ESBUILD_VERSION)

$(VENV)/.installed: requirements-dev.txt lib/pyproject.toml
	[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements-dev.txt
	touch $@

$(CONTRACT)/node_modules/.installed: $(CONTRACT)/package-lock.json
	cd $(CONTRACT) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

$(CONTRACT_G2)/node_modules/.installed: $(CONTRACT_G2)/package-lock.json
	cd $(CONTRACT_G2) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

serve: install
	$(BIN)/python -m codeexec.server

# Figures, not a test: the service against the bare sandboxed launch (BENCH_ARGS=--quick),
# one reaper pass over 10,000 leases, and the service under more than it takes on. It also
# times init and first requests on the functions' python3.12 (pyenv's, else one on the
# PATH) when there is one, in a venv of its own holding the layer's requirements.
.PHONY: bench
BENCH312 := .venv-bench312
bench: install
	-@[ -x $(BENCH312)/bin/python ] || { \
	  py=$$(pyenv prefix $$(pyenv versions --bare 2>/dev/null | grep '^3\.12' | tail -n1) 2>/dev/null)/bin/python3.12; \
	  [ -x "$$py" ] || py=$$(command -v python3.12); \
	  $$py -m venv $(BENCH312) && $(BENCH312)/bin/pip install -q -r lib/requirements.txt -e lib; }
	$(BIN)/python bench/bench.py $(BENCH_ARGS) $$([ -x $(BENCH312)/bin/python ] && echo --python $(BENCH312)/bin/python)
	$(BIN)/python bench/reaper_bench.py
	$(BIN)/python bench/load_bench.py

lint: $(VENV)/.installed
	$(BIN)/ruff check handlers lib tests bench

typecheck: $(VENV)/.installed
	$(BIN)/mypy handlers lib/codeexec

# The SAM CLI pins its own boto3, click and pydantic, so it gets a venv of its own.
SAM_VENV := .venv-sam
SAM := SAM_CLI_TELEMETRY=0 $(SAM_VENV)/bin/sam
$(SAM_VENV)/.installed: requirements-sam.txt
	[ -x $(SAM_VENV)/bin/python ] || $(PYTHON) -m venv $(SAM_VENV)
	$(SAM_VENV)/bin/pip install -q --upgrade pip
	$(SAM_VENV)/bin/pip install -q -r requirements-sam.txt
	touch $@

# template.yaml through cfn-lint; tests/test_sam.py then builds it (no container) and checks the bundle.
.PHONY: sam
sam: system-packages $(SAM_VENV)/.installed
	$(SAM) validate --lint

# pytest's exit code 5 (nothing collected) is not a failure of the suite.
pytest: install $(CONTRACT)/node_modules/.installed $(CONTRACT_G2)/node_modules/.installed
	$(BIN)/pytest $(PYTEST_ARGS); rc=$$?; [ $$rc -eq 5 ] && rc=0; exit $$rc

test: lint typecheck sam pytest

clean:
	rm -rf $(VENV) $(SAM_VENV) $(BENCH312) $(CONTRACT)/node_modules $(CONTRACT_G2)/node_modules .mypy_cache .ruff_cache .pytest_cache .aws-sam
