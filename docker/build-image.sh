#!/usr/bin/env bash
# The runner's image (Dockerfile) in the engine at $DOCKER_HOST, tagged ${1:-codeexec/runner:latest}.
# BASE=debian:bookworm-slim where a registry is reachable; by default the Debian base is
# bootstrapped from Debian's packages (docker/debian-base.sh). The build reaches Debian's
# and PyPI's mirrors through the host's network, trusting what the host trusts.
set -euo pipefail
cd "$(dirname "$0")/.."
TAG=${1:-codeexec/runner:latest}
BASE=${BASE:-codeexec/debian:bookworm}
[ "$BASE" != codeexec/debian:bookworm ] || docker/debian-base.sh
find docker/ca-certificates -name '*.crt' -delete
cp /usr/local/share/ca-certificates/*.crt docker/ca-certificates/ 2>/dev/null || true
ESBUILD_VERSION=$(sed -n 's/^ESBUILD_VERSION := //p' Makefile)
docker build --network host --build-arg "BASE=$BASE" --build-arg "ESBUILD_VERSION=$ESBUILD_VERSION" -t "$TAG" .
