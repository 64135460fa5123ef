#!/usr/bin/env bash
# The prefix of a CPython 3.12 on this host, for what builds the functions (their runtime is
# python3.12): PYTHON312_PREFIX when set, else pyenv's newest 3.12, else a python3.12 on the
# PATH. Debian 12 packages none; with none here, it says how to get one and fails.
set -euo pipefail
works() { [ -n "$1" ] && "$1/bin/python3.12" -c pass 2>/dev/null; }
prefix=${PYTHON312_PREFIX:-}
if ! works "$prefix" && command -v pyenv >/dev/null; then
  version=$(pyenv versions --bare 2>/dev/null | grep '^3\.12' | sort -V | tail -n1 || true)
  prefix=$([ -n "$version" ] && pyenv prefix "$version" 2>/dev/null || true)
fi
works "$prefix" || prefix=$(python3.12 -c 'import sys; print(sys.base_prefix)' 2>/dev/null || true)
if ! works "$prefix"; then
  echo "no CPython 3.12 here: the functions run on python3.12, and sam build without a container" \
    "needs one. Install one (pyenv install 3.12; or your distribution's python3.12) or set" \
    "PYTHON312_PREFIX; where Docker can pull images, sam build --use-container needs none." >&2
  exit 2
fi
echo "$prefix"
