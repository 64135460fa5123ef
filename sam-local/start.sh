#!/usr/bin/env bash
# `make sam-local`: the sam local steps of docs/backends.md in one, with no AWS account and no registry.
# A Docker engine of our own (dockerd.sh), the stand-in for Lambda's base image
# (base-image.sh), the runner on that engine's bridge, `sam build` for this host's
# architecture, and `sam local start-api` until it ends (Ctrl-C); then everything it
# started is stopped again, the engine included.
#
#   SAM_LOCAL_PORT (3000): where the API answers, http://127.0.0.1:$SAM_LOCAL_PORT/v1
#   RUNNER_PORT (8080):    the runner's port on the bridge; events/env.json's key is its key
#   SANDBOX_ROOT:          the runner's sessions, as for `make runner`
# Run as root (the engine, the image's bootstrap and the runner's sandboxes need it).
set -euo pipefail
# Job control: what runs in the background gets a process group of its own and keeps its
# interrupt (a script's background jobs would ignore it), so `stop` interrupts each once.
set -m
ROOT=$(cd "$(dirname "$0")/.." && pwd)
HERE=$ROOT/sam-local
ARCH=$(uname -m | sed 's/aarch64/arm64/')
BRIDGE_IP=172.30.99.1  # dockerd.sh's bridge: the host, as the functions see it
SAM=("$ROOT/.venv-sam/bin/sam")
export SAM_CLI_TELEMETRY=0
RUN=$(mktemp -d /tmp/cxsam-XXXXXX)  # short: containerd's socket paths hold 108 bytes
# Our engine's, from the start: a stop before it answers must not reach the host's own Docker.
export DOCKER_HOST=unix://$RUN/docker.sock
runner="" sam=""

# Asks a process to end with a signal, and kills it if it has not within the seconds given:
# sam has been seen to hang after an interrupt (a CI run, under load), and a Ctrl-C that
# never returns would leave the engine, whose data root the next engine needs, running.
end() {  # pid signal seconds
  kill -"$2" "$1" 2>/dev/null || return 0
  for _ in $(seq "$3"); do kill -0 "$1" 2>/dev/null || break; sleep 1; done
  kill -KILL "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

stop() {
  # Once stopping, a second Ctrl-C or a TERM must not cut it short: what it would leave (the
  # engine, the runner) holds the data root and ports the next start needs.
  trap - EXIT
  trap '' INT TERM
  # sam removes its warm containers on an interrupt; then the runner, then the engine with
  # whatever container is left.
  [ -z "$sam" ] || end "$sam" INT 30
  [ -z "$runner" ] || end "$runner" TERM 30
  left=$(docker ps -aq 2>/dev/null || true)
  [ -z "$left" ] || docker rm -f $left >/dev/null 2>&1 || true
  "$HERE/dockerd.sh" stop "$RUN" >/dev/null 2>&1 || true
  rm -rf "$RUN"
}
trap stop EXIT
trap 'exit 130' INT TERM

"$HERE/dockerd.sh" start "$RUN" >/dev/null
PYTHON312_PREFIX=$("$HERE/python312.sh")
export PYTHON312_PREFIX
"$HERE/base-image.sh" "$ARCH"

# The runner, with the key and at the address the functions are given (events/env.json).
RUNNER_URL=http://$BRIDGE_IP:${RUNNER_PORT:-8080}
RUNNER_KEY=$("$ROOT/.venv/bin/python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["ApiFunction"]["RUNNER_KEY"])' \
  "$ROOT/events/env.json")
RUNNER_HOST=$BRIDGE_IP RUNNER_PORT=${RUNNER_PORT:-8080} RUNNER_KEY=$RUNNER_KEY "$ROOT/.venv/bin/python" -m codeexec.runner &
runner=$!
"$ROOT/.venv/bin/python" - "$ROOT/events/env.json" "$RUNNER_URL" >"$RUN/env.json" <<'PY'
import json, sys
variables = json.load(open(sys.argv[1]))
for function in variables.values():
    function["RUNNER_URL"] = sys.argv[2]
print(json.dumps(variables))
PY

cd "$ROOT"
PATH=$PYTHON312_PREFIX/bin:$PATH "${SAM[@]}" build --build-dir "$RUN/build" --parameter-overrides "Architecture=$ARCH"
echo "the API: http://127.0.0.1:${SAM_LOCAL_PORT:-3000}/v1 (key: the API function's CODE_EXEC_API_KEY in events/env.json)"
"${SAM[@]}" local start-api -t "$RUN/build/template.yaml" --skip-pull-image --port "${SAM_LOCAL_PORT:-3000}" \
  --env-vars "$RUN/env.json" --warm-containers EAGER --parameter-overrides "Architecture=$ARCH" &
sam=$!
wait "$sam"
