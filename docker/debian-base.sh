#!/usr/bin/env bash
# Debian 12 as a Docker base image, bootstrapped from Debian's own packages (debootstrap)
# where no registry can be reached: tagged codeexec/debian:bookworm in the engine at
# $DOCKER_HOST. With a registry, the Dockerfile's default base (debian:bookworm-slim) is pulled.
set -euo pipefail
TAG=codeexec/debian:bookworm
CACHE=${CACHE:-/var/cache/codeexec}
ARCH=$(dpkg --print-architecture)
if docker image inspect "$TAG" >/dev/null 2>&1; then echo "$TAG is there already"; exit 0; fi
ROOTFS=$CACHE/debian-bookworm-$ARCH
if [ ! -e "$ROOTFS/.complete" ]; then
  rm -rf "$ROOTFS"; mkdir -p "$CACHE"
  debootstrap --variant=minbase --arch="$ARCH" bookworm "$ROOTFS"
  rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
  touch "$ROOTFS/.complete"
fi
tar -C "$ROOTFS" --exclude=./.complete -c . | docker import -c 'CMD ["bash"]' - "$TAG"
echo "built $TAG"
