#!/bin/bash
# HTTP server for the cuda scenario's local CUDA repository, on the test bridge's address (own port
# and pid file, so it runs beside the HTTP server of other scenarios).
#
#   repo-server.sh start DIR [PORT]   serve DIR on http://<bridge address>:PORT/ (default 8732)
#   repo-server.sh stop
set -euo pipefail
STATE=${LLAMAFLEET_TESTHOSTS:-/var/tmp/llamafleet-testhosts}
GW=${LLAMAFLEET_NET:-10.131.7}.1
PIDF=$STATE/cuda-repo-http.pid

case "${1:-}" in
  start)
    dir=${2:?dir} port=${3:-8732}
    if [ -e "$PIDF" ] && kill -0 "$(cat "$PIDF")" 2>/dev/null; then exit 0; fi
    mkdir -p "$STATE"
    setsid python3 -m http.server --bind "$GW" --directory "$dir" "$port" </dev/null >"$STATE/cuda-repo-http.log" 2>&1 &
    echo $! > "$PIDF"
    for _ in $(seq 1 50); do
      python3 -c "import socket; socket.create_connection(('$GW', $port), 1)" 2>/dev/null \
        && { echo "serving $dir on http://$GW:$port/" >&2; exit 0; }
      sleep 0.1
    done
    echo "HTTP server did not start: $(tail -5 "$STATE/cuda-repo-http.log")" >&2
    exit 1
    ;;
  stop)
    if [ -e "$PIDF" ]; then kill "$(cat "$PIDF")" 2>/dev/null || true; rm -f "$PIDF"; fi
    ;;
  *) sed -n '2,7p' "$0"; exit 2 ;;
esac
