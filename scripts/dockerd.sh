#!/usr/bin/env bash
# Start, stop or query a Docker daemon isolated from the host network and from any system daemon.
#
#   scripts/dockerd.sh start [DIR]   start dockerd under DIR (default /var/tmp/nexus-docker); prints the DOCKER_HOST line
#   scripts/dockerd.sh stop [DIR]    stop the daemon started there, by the PID recorded at start
#   scripts/dockerd.sh status [DIR]  say whether it answers
#
# Use: eval "$(scripts/dockerd.sh start)"   # exports DOCKER_HOST
set -euo pipefail

cmd="${1:-}"
dir="${2:-${NEXUS_DOCKER_DIR:-/var/tmp/nexus-docker}}"
sock="unix://${dir}/docker.sock"
pidkeep="${dir}/dockerd.pid.keep" # dockerd deletes its own pidfile on shutdown; keep a copy to stop it by PID

answers() { DOCKER_HOST="$sock" timeout 10 docker info >/dev/null 2>&1; }

alive() { [[ -f "$pidkeep" ]] && kill -0 "$(cat "$pidkeep")" 2>/dev/null; }

start() {
  command -v dockerd >/dev/null || { echo "dockerd not found: apt-get install -y docker.io" >&2; exit 1; }
  mkdir -p "$dir"
  if alive && answers; then
    echo "export DOCKER_HOST=$sock"
    return
  fi
  dockerd --iptables=false --ip-masq=false --bridge=none \
    --data-root "$dir/data" --exec-root "$dir/exec" --pidfile "$dir/dockerd.pid" \
    -H "$sock" >"$dir/dockerd.log" 2>&1 &
  echo $! >"$pidkeep"
  for _ in $(seq 1 120); do
    if answers; then
      echo "export DOCKER_HOST=$sock"
      return
    fi
    alive || { echo "dockerd exited; see $dir/dockerd.log" >&2; tail -20 "$dir/dockerd.log" >&2; exit 1; }
    sleep 0.5
  done
  echo "dockerd did not answer within 60 s; see $dir/dockerd.log" >&2
  exit 1
}

stop() {
  if ! alive; then
    echo "no dockerd running from $dir"
    rm -f "$pidkeep"
    return
  fi
  pid="$(cat "$pidkeep")"
  kill -TERM "$pid"
  for _ in $(seq 1 60); do
    kill -0 "$pid" 2>/dev/null || { rm -f "$pidkeep"; echo "dockerd $pid stopped"; return; }
    sleep 0.5
  done
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$pidkeep"
  echo "dockerd $pid killed after 30 s"
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  status) if answers; then echo "running: DOCKER_HOST=$sock"; else echo "not running ($dir)"; exit 1; fi ;;
  *) echo "usage: $0 start|stop|status [DIR]" >&2; exit 2 ;;
esac
