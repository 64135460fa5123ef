#!/usr/bin/env bash
# A stand-in for Lambda's Python base image, public.ecr.aws/lambda/python:3.11-<arch>, where
# no registry can be reached: Debian 12 bootstrapped from its packages (debootstrap),
# PyPI's awslambdaric as the runtime interface client, imported into the Docker engine at
# $DOCKER_HOST under the tag `sam local --skip-pull-image` looks for. With a registry,
# skip this: `sam local start-api` pulls the real image itself.
#
#   sam-local/base-image.sh [ARCH]      ARCH: x86_64 (default) or arm64; CACHE: where the
#                                       bootstrapped tree is kept between builds
set -euo pipefail
ARCH=${1:-x86_64}
CACHE=${CACHE:-/var/cache/codeexec}
TAG=public.ecr.aws/lambda/python:3.11-$ARCH
case $ARCH in
  x86_64) DEB_ARCH=amd64; WHEEL=manylinux2014_x86_64 ;;
  arm64) DEB_ARCH=arm64; WHEEL=manylinux2014_aarch64 ;;
  *) echo "ARCH is x86_64 or arm64" >&2; exit 2 ;;
esac
if docker image inspect "$TAG" >/dev/null 2>&1; then
  echo "$TAG is there already"; exit 0
fi
ROOTFS=$CACHE/lambda-python3.11-$ARCH
if [ ! -e "$ROOTFS/.complete" ]; then
  if [ ! -e "$ROOTFS/usr/bin/python3.11" ]; then
    rm -rf "$ROOTFS"; mkdir -p "$CACHE"
    # What the real image has that a function may use: Python 3.11 and CA certificates.
    debootstrap --variant=minbase --arch="$DEB_ARCH" --include=python3.11,ca-certificates bookworm "$ROOTFS"
  fi
  # --target installs into the tree, not into Debian's Python: the PEP 668 guard does not apply.
  python3 -m pip install -q --disable-pip-version-check --break-system-packages --target "$ROOTFS/var/runtime" \
    --platform "$WHEEL" --python-version 3.11 --implementation cp --only-binary=:all: --upgrade awslambdaric boto3
  # What the emulator starts: the runtime interface client, on the handler Lambda names.
  cat > "$ROOTFS/var/runtime/bootstrap" <<'BOOT'
#!/bin/sh
export PYTHONPATH="/var/task:/opt/python:/var/runtime${PYTHONPATH:+:$PYTHONPATH}"
exec /usr/bin/python3.11 -m awslambdaric "$_HANDLER"
BOOT
  chmod 755 "$ROOTFS/var/runtime/bootstrap"
  mkdir -p "$ROOTFS/var/task" "$ROOTFS/opt"
  rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
  touch "$ROOTFS/.complete"
fi
tar -C "$ROOTFS" --exclude=./.complete -c . | docker import \
  -c 'ENV LAMBDA_TASK_ROOT=/var/task' -c 'ENV LAMBDA_RUNTIME_DIR=/var/runtime' -c 'WORKDIR /var/task' \
  -c 'ENTRYPOINT ["/var/runtime/bootstrap"]' - "$TAG"
echo "built $TAG"
