#!/usr/bin/env bash
# Installs Debian's packages: deps/apt.txt, deps/apt-backports.txt from bookworm-backports
# (whose apt source it adds where missing: Debian's own mirror), and Node.js of the major
# version deps/node/node-version names where no such `node` is installed: Debian 12's own is
# 18, which the npm set refuses (sharp, cheerio, marked, pdfjs-dist), so Debian's npm fetches
# the official build from the npm registry (node-linux-<arch>). Run by `make install` and by
# the Dockerfile: the hosts and the image get one Node.
#   deps/install-apt.sh --check   exits 0 when all is installed, 1 otherwise (no root needed)
set -euo pipefail
deps=$(cd "$(dirname "$0")" && pwd)
packages=$(grep -hv '^#' "$deps/apt.txt")
backports=$(grep -hv '^#' "$deps/apt-backports.txt")
node_version=$(cat "$deps/node/node-version")
have_node() {
  command -v npm >/dev/null && [ "$(node --version 2>/dev/null | sed 's/^v\([0-9]*\).*/\1/')" = "${node_version%%.*}" ]
}
# A backports package counts only in its backports version (Debian 12 has its own, older).
installed() {
  dpkg -s $packages >/dev/null 2>&1 && have_node &&
    ! dpkg-query -W -f='${Version}\n' $backports 2>/dev/null | grep -qv '~bpo12' &&
    [ "$(dpkg-query -W -f='${Version}\n' $backports 2>/dev/null | wc -l)" = "$(echo "$backports" | wc -w)" ]
}
if [ "${1:-}" = --check ]; then installed; exit; fi
installed && exit 0
source=/etc/apt/sources.list.d/bookworm-backports.sources
grep -rqs '^Suites:.*bookworm-backports\|^deb .* bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/ || \
  printf '%s\n' 'Types: deb' 'URIs: http://deb.debian.org/debian' 'Suites: bookworm-backports' 'Components: main' \
    'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg' > "$source"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends $packages $(command -v npm >/dev/null || echo npm)
apt-get install -y -qq --no-install-recommends -t bookworm-backports $backports
if ! have_node; then
  work=$(mktemp -d)
  (cd "$work" && npm pack --silent "node-linux-$(dpkg --print-architecture | sed s/amd64/x64/)@$node_version" >/dev/null &&
    tar -xzf node-linux-*.tgz && install -m 0755 package/bin/node /usr/bin/node)
  rm -rf "$work"
fi
