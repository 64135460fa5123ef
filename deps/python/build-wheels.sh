#!/usr/bin/env bash
# Wheels for the packages of sdists.txt, which publish none, into DIR (needs uv: $UV, else
# `uv` on the PATH):   deps/python/build-wheels.sh DIR
# Each sdist is checked against its hash and built by the pinned setuptools of
# build-constraints.txt, with fixed file times (SOURCE_DATE_EPOCH) and modes (umask), so
# the wheel hashes the same on every machine: `make lock` pins that hash, and an install
# that builds a different wheel fails on it instead of running something unreviewed.
set -euo pipefail
deps=$(cd "$(dirname "$0")" && pwd)
out=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
umask 022
python3 -m pip download --quiet --no-deps --no-binary :all: --require-hashes -r "$deps/sdists.txt" -d "$work"
for sdist in "$work"/*.tar.gz; do
  SOURCE_DATE_EPOCH=1577836800 "${UV:-uv}" build --quiet --no-config --python /usr/bin/python3 --wheel \
    --build-constraints "$deps/build-constraints.txt" --require-build-hashes -o "$out" "$sdist"
done
