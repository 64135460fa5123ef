#!/usr/bin/env bash
# Installs Debian's packages: deps/apt.txt, deps/apt-backports.txt from bookworm-backports
# (whose apt source it adds where missing: Debian's own mirror), and Node.js with npm
# where no `node` is installed. Run by `make install` and by the Dockerfile.
#   deps/install-apt.sh --check   exits 0 when all is installed, 1 otherwise (no root needed)
set -euo pipefail
deps=$(cd "$(dirname "$0")" && pwd)
packages=$(grep -hv '^#' "$deps/apt.txt")
backports=$(grep -hv '^#' "$deps/apt-backports.txt")
have_node() { command -v node >/dev/null && command -v npm >/dev/null; }
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
apt-get install -y -qq --no-install-recommends $packages $(have_node || echo nodejs npm)
apt-get install -y -qq --no-install-recommends -t bookworm-backports $backports
