#!/bin/bash
# Print how much of a second `claude -p` run's prompt llama-server serves from its cache, with the
# settings the claude_code role writes (attribution header off) and with the header switched on.
#
#   molecule converge -s claude && molecule/claude/reuse-ratio.sh [SERVER_IP [CLIENT_IP [USER]]]
#
# For each setting: in USER's git repository on the client, `claude -p` with one prompt, a tracked
# file edited, `claude -p` with another prompt; the server's /metrics counters
# (llamacpp:prompt_tokens_total = evaluated, llamacpp:prompt_tokens_cached_total = reused) are read
# before and after each run. While the runs last, the client's routes reach only the server and the
# controller (no default route: nothing leaves the test network). The header is restored to "0".
# With the header off, a third run continues run 2's session (`--continue`): the same session's next
# turn. The last three lines are machine-readable: `reuse_continue=0.998` (run 3),
# `reuse_header_off=0.921` and `reuse_header_on=0.001` (run 2, a new session).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
NET=${LLAMAFLEET_NET:-10.131.7}
SERVER=${1:-$NET.31}
CLIENT=${2:-$NET.32}
USER_NAME=${3:-dev}
KEY=$("$here/../_shared/testhost.sh" key)
GW=$("$here/../_shared/testhost.sh" gateway)

ssh -i "$KEY" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR \
  -o BatchMode=yes "root@$CLIENT" bash -s -- "$SERVER" "$GW" "$USER_NAME" <<'REMOTE'
set -euo pipefail
SERVER=$1 GW=$2 U=$3
HOME_DIR=$(getent passwd "$U" | cut -d: -f6)
SETTINGS=$HOME_DIR/.claude/settings.json
REPO=$HOME_DIR/project
[ -f "$SETTINGS" ] || { echo "no $SETTINGS: run the converge first" >&2; exit 1; }
[ -d "$REPO/.git" ] || { echo "no git repository $REPO" >&2; exit 1; }
command -v claude >/dev/null || { echo "claude is not installed" >&2; exit 1; }

# Claude Code reads the managed file over the user's: that is where the header goes when it exists.
TARGET=$SETTINGS
[ -f /etc/claude-code/managed-settings.json ] && TARGET=/etc/claude-code/managed-settings.json

set_header() { # rewrite the file in place: owner and mode stay
  python3 - "$TARGET" "$1" <<'PY'
import json, sys
path, value = sys.argv[1], sys.argv[2]
with open(path) as fh:
    data = json.load(fh)
data.setdefault("env", {})["CLAUDE_CODE_ATTRIBUTION_HEADER"] = value
with open(path, "r+") as fh:
    fh.seek(0); fh.truncate(); fh.write(json.dumps(data, indent=2) + "\n")
PY
}

metrics() { # "evaluated cached seconds" from the server's /metrics (with the user's key)
  python3 - "$SETTINGS" "$TARGET" <<'PY'
import json, ssl, sys, urllib.request
env = {}
for path in sys.argv[1:]:
    env.update(json.load(open(path)).get("env", {}))
req = urllib.request.Request(env["ANTHROPIC_BASE_URL"].rstrip("/") + "/metrics",
                             headers={"Authorization": "Bearer " + env["ANTHROPIC_AUTH_TOKEN"]})
# an https server: trust the CA the role gave Claude Code (NODE_EXTRA_CA_CERTS)
ctx = ssl.create_default_context(cafile=env.get("NODE_EXTRA_CA_CERTS") or None)
vals = {}
for line in urllib.request.urlopen(req, timeout=30, context=ctx).read().decode().splitlines():
    if line.startswith("llamacpp:"):
        name, value = line.split()[:2]
        vals[name] = float(value)
print(int(vals["llamacpp:prompt_tokens_total"]), int(vals["llamacpp:prompt_tokens_cached_total"]),
      vals["llamacpp:prompt_seconds_total"])
PY
}

# Isolation: no default route, only the server and the controller (which drives this session).
routes=$(ip -4 route show)
restore() {
  set_header 0 || true
  ip -4 route flush table main 2>/dev/null || true
  for _ in 1 2; do  # twice: a gateway route needs its link route first
    while read -r r; do [ -n "$r" ] && ip route add $r 2>/dev/null || true; done <<<"$routes"
  done
}
trap restore EXIT
dev=$(ip -4 route show default | awk '{print $5; exit}')
net=$(ip -4 route show dev "$dev" scope link | awk '{print $1; exit}')
ip route del default
ip route del "$net" dev "$dev"
ip route add "$SERVER/32" dev "$dev"
ip route add "$GW/32" dev "$dev"
if python3 -c 'import socket; socket.create_connection(("1.1.1.1", 443), 3)' 2>/dev/null; then
  echo "isolation failed: the internet is reachable" >&2; exit 1
fi

run_claude() { # prompt [claude option...] -> seconds
  local t0 t1
  t0=$(date +%s.%N)
  sudo -u "$U" -H bash -c 'cd ~/project && timeout 600 claude "${@:2}" -p "$1" </dev/null >/tmp/claude-run.out 2>&1' _ "$@" \
    || { echo "claude -p failed:" >&2; cat /tmp/claude-run.out >&2; exit 1; }
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}'
}

declare -A ratio
n=0
# Every prompt starts with its own random tag: prompts never seen by the server's cache before,
# differing from their first character as real ones do (the attribution header carries a hash of a
# few characters at the start of the prompt, so prompts that begin alike would share a header).
tag() { od -An -N12 -tx1 /dev/urandom | tr -d ' \n'; }
for mode in off on; do
  set_header "$([ $mode = off ] && echo 0 || echo 1)"
  n=$((n + 1))
  read -r e0 c0 s0 < <(metrics)
  w1=$(run_claude "$(tag) Say OK about notes.txt, please.")
  read -r e1 c1 s1 < <(metrics)
  sudo -u "$U" -H bash -c 'cd ~/project && echo "edit $RANDOM" >> notes.txt'
  w2=$(run_claude "$(tag) What changed in notes.txt since then?")
  read -r e2 c2 s2 < <(metrics)
  ev=$((e2 - e1)) ca=$((c2 - c1))
  ratio[$mode]=$(awk -v c="$ca" -v e="$ev" 'BEGIN{ if (c + e > 0) printf "%.3f", c / (c + e); else print "nan" }')
  awk -v m="$mode" -v p1=$(((e1 - e0) + (c1 - c0))) -v p2=$((ev + ca)) -v ca="$ca" -v r="${ratio[$mode]}" \
      -v t1="$(awk -v a="$s0" -v b="$s1" 'BEGIN{print (b-a)*1000}')" \
      -v t2="$(awk -v a="$s1" -v b="$s2" 'BEGIN{print (b-a)*1000}')" -v w1="$w1" -v w2="$w2" \
      'BEGIN{printf "attribution header %-3s: run 2 (new session) prompt %d tokens, %d reused (%.1f %%); run 1 prompt %d tokens; prompt eval %.0f -> %.0f ms; claude -p wall %s s -> %s s\n", m, p2, ca, r * 100, p1, t1, t2, w1, w2}'
  if [ $mode = off ]; then
    # the same session's next turn: run 2 continued
    w3=$(run_claude "$(tag) And what is in it now?" --continue)
    read -r e3 c3 s3 < <(metrics)
    ev3=$((e3 - e2)) ca3=$((c3 - c2))
    ratio[continue]=$(awk -v c="$ca3" -v e="$ev3" 'BEGIN{ if (c + e > 0) printf "%.3f", c / (c + e); else print "nan" }')
    awk -v p3=$((ev3 + ca3)) -v ca="$ca3" -v r="${ratio[continue]}" -v w3="$w3" \
      'BEGIN{printf "attribution header off: run 3 (--continue, same session) prompt %d tokens, %d reused (%.1f %%); claude -p wall %s s\n", p3, ca, r * 100, w3}'
  fi
done
echo "reuse_continue=${ratio[continue]}"
echo "reuse_header_off=${ratio[off]}"
echo "reuse_header_on=${ratio[on]}"
REMOTE
