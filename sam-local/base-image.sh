#!/usr/bin/env bash
# A stand-in for Lambda's Python base image, public.ecr.aws/lambda/python:3.12-<arch>, where
# no registry can be reached: Debian 12 bootstrapped from its packages (debootstrap), the
# host's own CPython 3.12 (Debian 12 packages none: pyenv's, as on these machines; or
# PYTHON312_PREFIX) copied in at the prefix it was built for, PyPI's awslambdaric as the
# runtime interface client, imported into the Docker engine at $DOCKER_HOST under the tag
# `sam local --skip-pull-image` looks for. With a registry, skip this: `sam local
# start-api` pulls the real image itself.
#
#   sam-local/base-image.sh [ARCH]      ARCH: the host's (x86_64 or arm64): the interpreter
#                                       is the host's; CACHE: where the tree is kept
set -euo pipefail
ARCH=${1:-x86_64}
CACHE=${CACHE:-/var/cache/codeexec}
TAG=public.ecr.aws/lambda/python:3.12-$ARCH
case $ARCH in
  x86_64) DEB_ARCH=amd64; WHEEL=manylinux2014_x86_64 ;;
  arm64) DEB_ARCH=arm64; WHEEL=manylinux2014_aarch64 ;;
  *) echo "ARCH is x86_64 or arm64" >&2; exit 2 ;;
esac
if [ "$DEB_ARCH" != "$(dpkg --print-architecture)" ]; then
  echo "the stand-in carries this host's Python: build it for this host's architecture" >&2; exit 2
fi
PREFIX=$("$(dirname "$0")/python312.sh")
if docker image inspect "$TAG" >/dev/null 2>&1; then
  echo "$TAG is there already"; exit 0
fi
ROOTFS=$CACHE/lambda-python3.12-$ARCH
if [ ! -e "$ROOTFS/.complete" ]; then
  if [ ! -e "$ROOTFS/usr/bin/openssl" ]; then
    rm -rf "$ROOTFS"; mkdir -p "$CACHE"
    # What the real image has that a function may use: CA certificates, and the libraries
    # CPython's own modules load (ssl, ctypes, sqlite3, the compressors).
    debootstrap --variant=minbase --arch="$DEB_ARCH" \
      --include=ca-certificates,openssl,libssl3,libffi8,zlib1g,libbz2-1.0,liblzma5,libsqlite3-0,libexpat1,libuuid1 \
      bookworm "$ROOTFS"
  fi
  # The interpreter at its own prefix (it finds its libpython there), without its tests and packages.
  mkdir -p "$ROOTFS$PREFIX"
  tar -C "$PREFIX" --exclude='lib/python3.12/test' --exclude='lib/python3.12/site-packages/*' \
    --exclude='lib/python3.12/idlelib' --exclude='lib/python3.12/tkinter' --exclude='__pycache__' \
    -c bin/python3.12 lib | tar -C "$ROOTFS$PREFIX" -x
  # --target installs into the tree, not into a Python: the PEP 668 guard does not apply.
  python3 -m pip install -q --disable-pip-version-check --break-system-packages --target "$ROOTFS/var/runtime" \
    --platform "$WHEEL" --python-version 3.12 --implementation cp --only-binary=:all: --upgrade awslambdaric boto3
  # What the emulator starts: the runtime interface client, on the handler Lambda names.
  cat > "$ROOTFS/var/runtime/bootstrap" <<BOOT
#!/bin/sh
export PYTHONPATH="/var/task:/opt/python:/var/runtime\${PYTHONPATH:+:\$PYTHONPATH}"
exec $PREFIX/bin/python3.12 -m awslambdaric "\$_HANDLER"
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
