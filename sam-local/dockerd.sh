#!/usr/bin/env bash
# A Docker engine of our own for sam local, beside any other on this host: its own socket,
# state and bridge (codeexec0, 172.30.99.1/24), and no iptables rules or NAT (the functions
# reach the runner on the bridge and nothing else).
#
#   sam-local/dockerd.sh start RUN_DIR   starts it; prints DOCKER_HOST=unix://RUN_DIR/docker.sock
#   sam-local/dockerd.sh stop RUN_DIR    stops it and removes the bridge
#
# Images are kept in DATA_ROOT (default /var/lib/codeexec-docker) between runs.
set -euo pipefail
ACTION=$1
RUN=$2
BRIDGE=codeexec0
BRIDGE_IP=172.30.99.1/24
DATA_ROOT=${DATA_ROOT:-/var/lib/codeexec-docker}
case $ACTION in
start)
  mkdir -p "$RUN" "$DATA_ROOT"
  ip link show "$BRIDGE" >/dev/null 2>&1 || {
    ip link add "$BRIDGE" type bridge
    ip addr add "$BRIDGE_IP" dev "$BRIDGE"
  }
  ip link set "$BRIDGE" up
  # A session of its own: an interrupt meant for the caller (Ctrl-C) leaves it to `stop`.
  setsid dockerd --data-root "$DATA_ROOT" --exec-root "$RUN/exec" --pidfile "$RUN/dockerd.pid" \
    -H "unix://$RUN/docker.sock" --bridge "$BRIDGE" --iptables=false --ip-masq=false \
    --containerd-namespace codeexec --containerd-plugins-namespace codeexec-plugins \
    >"$RUN/dockerd.log" 2>&1 &
  for _ in $(seq 100); do
    DOCKER_HOST="unix://$RUN/docker.sock" docker version >/dev/null 2>&1 && {
      echo "DOCKER_HOST=unix://$RUN/docker.sock"; exit 0; }
    sleep 0.2
  done
  echo "dockerd did not start; its log: $RUN/dockerd.log" >&2
  tail -20 "$RUN/dockerd.log" >&2
  exit 1
  ;;
stop)
  if [ -s "$RUN/dockerd.pid" ]; then
    PID=$(cat "$RUN/dockerd.pid")
    kill "$PID" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$PID" 2>/dev/null || break; sleep 0.2; done
  fi
  ip link del "$BRIDGE" 2>/dev/null || true
  ;;
*) echo "start or stop" >&2; exit 2 ;;
esac
