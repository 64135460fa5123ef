#!/bin/sh
# The image's entrypoint: settings from files, then the command. Each file of /run/secrets
# (Swarm's secrets; a Kubernetes secret mounted there) named after a setting, runner_key
# say, sets it (RUNNER_KEY) unless the environment does already: keys stay out of the
# service's definition and of `docker inspect`.
set -eu
for file in /run/secrets/*; do
  [ -f "$file" ] || continue
  name=$(basename "$file" | tr '[:lower:]-' '[:upper:]_')
  case $name in '' | [0-9]* | *[!A-Z0-9_]*) continue ;; esac
  eval "given=\${$name+x}"
  [ -n "$given" ] || export "$name=$(cat "$file")"
done
exec "$@"
