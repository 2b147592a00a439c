#!/bin/bash
# Print how much of a second `claude -p` run's prompt llama-server serves from its cache, with the
# settings the claude_code role writes (attribution header off) and with the header switched on.
#
#   molecule converge -s claude && molecule/claude/reuse-ratio.sh [SERVER_IP [CLIENT_IP [USER]]]
#
# For each setting: in USER's git repository on the client, `claude -p` with one prompt, a tracked
# file edited, `claude -p` with another prompt; each run's usage as Claude Code reports it
# (`--output-format json`: input_tokens = evaluated by the server, cache_read_input_tokens = read
# from its cache; the fork's /metrics has no cached-tokens counter). While the runs last, the
# client's routes reach only the server and the controller (no default route: nothing leaves the
# test network). The header is restored to "0".
# With the header off, a third run continues run 2's session (`--continue`): the same session's next
# turn, and four more turns of that session (runs 4 to 7, the tracked file edited before each).
# Then a session with six tool calls (Read and Edit results; testbed/claude-tool-turns.py).
# The last lines are machine-readable: `tool_turns=6`, `reuse_of_held=1.000,...` and
# `reuse_min_of_held=1.000` (the tool session: each request's cached tokens over the previous
# request's prompt), `reuse_turns=0.998,...` (runs 4 to 7),
# `reuse_continue=0.998` (run 3),
# `reuse_header_off=0.921` and `reuse_header_on=0.001` (run 2, a new session).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
NET=${LLAMAFLEET_NET:-10.131.7}
SERVER=${1:-$NET.31}
CLIENT=${2:-$NET.32}
USER_NAME=${3:-dev}
KEY=$("$here/../../testbed/testhost.sh" key)
GW=$("$here/../../testbed/testhost.sh" gateway)

SSH=(ssh -i "$KEY" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR
  -o BatchMode=yes "root@$CLIENT")
# the multi-turn session's stand-in for the model's tool choice (see the end of the remote part)
"${SSH[@]}" 'cat > /usr/local/lib/claude-tool-turns.py && chmod 0755 /usr/local/lib/claude-tool-turns.py' \
  < "$here/../../testbed/claude-tool-turns.py"
"${SSH[@]}" bash -s -- "$SERVER" "$GW" "$USER_NAME" <<'REMOTE'
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

setting() { # the env value KEY of the file Claude Code reads
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("env", {}).get(sys.argv[2], ""))' "$TARGET" "$1"
}
BASE_URL=$(setting ANTHROPIC_BASE_URL)
set_header() { set_env CLAUDE_CODE_ATTRIBUTION_HEADER "$1"; }
set_env() { # KEY VALUE: rewrite the file in place, owner and mode stay
  python3 - "$TARGET" "$1" "$2" <<'PY'
import json, sys
path, key, value = sys.argv[1], sys.argv[2], sys.argv[3]
with open(path) as fh:
    data = json.load(fh)
data.setdefault("env", {})[key] = value
with open(path, "r+") as fh:
    fh.seek(0); fh.truncate(); fh.write(json.dumps(data, indent=2) + "\n")
PY
}

# Isolation: no default route, only the server and the controller (which drives this session).
routes=$(ip -4 route show)
restore() {
  set_header 0 || true
  set_env ANTHROPIC_BASE_URL "$BASE_URL" || true
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

# One `claude -p` run; prints "seconds input_tokens cache_read_input_tokens": the usage Claude Code
# reports for the run (--output-format json), i.e. what the server answered in `usage` (the tokens
# it evaluated, the tokens it read from its cache). With the role's settings a run sends one
# request (no side requests).
run_claude() { # prompt [claude option...]
  local t0 t1
  t0=$(date +%s.%N)
  sudo -u "$U" -H bash -c 'cd ~/project && timeout 600 claude "${@:2}" --output-format json -p "$1" </dev/null >/tmp/claude-run.out 2>/tmp/claude-run.err' _ "$@" \
    || { echo "claude -p failed:" >&2; cat /tmp/claude-run.out /tmp/claude-run.err >&2; exit 1; }
  t1=$(date +%s.%N)
  python3 - "$t0" "$t1" <<'PY'
import json, sys
out = json.load(open("/tmp/claude-run.out"))
u = out.get("usage") or {}
print(f"{float(sys.argv[2]) - float(sys.argv[1]):.1f}", int(u.get("input_tokens") or 0),
      int(u.get("cache_read_input_tokens") or 0))
PY
}

ratio_of() { awk -v c="$2" -v e="$1" 'BEGIN{ if (c + e > 0) printf "%.3f", c / (c + e); else print "nan" }'; }

declare -A ratio
# Every prompt starts with its own random tag: prompts never seen by the server's cache before,
# differing from their first character as real ones do (the attribution header carries a hash of a
# few characters at the start of the prompt, so prompts that begin alike would share a header).
tag() { od -An -N12 -tx1 /dev/urandom | tr -d ' \n'; }
for mode in off on; do
  set_header "$([ $mode = off ] && echo 0 || echo 1)"
  read -r w1 i1 c1 < <(run_claude "$(tag) Say OK about notes.txt, please.")
  sudo -u "$U" -H bash -c 'cd ~/project && echo "edit $RANDOM" >> notes.txt'
  read -r w2 i2 c2 < <(run_claude "$(tag) What changed in notes.txt since then?")
  ratio[$mode]=$(ratio_of "$i2" "$c2")
  printf 'attribution header %-3s: run 2 (new session) prompt %d tokens, %d reused (%.1f %%); run 1 prompt %d tokens; claude -p wall %s s -> %s s\n' \
    "$mode" $((i2 + c2)) "$c2" "$(awk -v r="${ratio[$mode]}" 'BEGIN{print r * 100}')" $((i1 + c1)) "$w1" "$w2"
  if [ $mode = off ]; then
    # the same session's next turn: run 2 continued
    read -r w3 i3 c3 < <(run_claude "$(tag) And what is in it now?" --continue)
    ratio[continue]=$(ratio_of "$i3" "$c3")
    printf 'attribution header off: run 3 (--continue, same session) prompt %d tokens, %d reused (%.1f %%); claude -p wall %s s\n' \
      $((i3 + c3)) "$c3" "$(awk -v r="${ratio[continue]}" 'BEGIN{print r * 100}')" "$w3"
    # four more turns of the same session, the tracked file edited before each: every turn after
    # the first must find the whole conversation so far in the server's cache
    turns=()
    for n in 4 5 6 7; do
      sudo -u "$U" -H bash -c 'cd ~/project && echo "turn edit $RANDOM" >> notes.txt'
      read -r wn in_ cn < <(run_claude "$(tag) Turn $n: what is the last line of notes.txt now?" --continue)
      turns+=("$(ratio_of "$in_" "$cn")")
      printf 'attribution header off: run %d (--continue) prompt %d tokens, %d reused (%.1f %%); claude -p wall %s s\n' \
        "$n" $((in_ + cn)) "$cn" "$(awk -v r="${turns[-1]}" 'BEGIN{print r * 100}')" "$wn"
    done
  fi
done
# A session with real tool calls: one `claude -p` whose turns call Read and Edit on notes.txt six
# times (testbed/claude-tool-turns.py: a stand-in on the client's loopback forwards every request to
# the server, which evaluates the real prompt, and answers with the scripted tool call the tiny
# model cannot choose). The file Claude Code reads points at the stand-in meanwhile.
set_env ANTHROPIC_BASE_URL http://127.0.0.1:18999
sudo -u "$U" -H /usr/local/lib/claude-tool-turns.py --upstream "$BASE_URL" \
  --ca-file "$(setting NODE_EXTRA_CA_CERTS)" --listen 127.0.0.1:18999 --workdir "$REPO" \
  --tool-turns 6 >/tmp/tool-turns.out 2>&1 || { cat /tmp/tool-turns.out >&2; exit 1; }
set_env ANTHROPIC_BASE_URL "$BASE_URL"
grep -E '^(turn [0-9]+:|claude:)' /tmp/tool-turns.out | sed 's/^/tool session: /'
grep -E '^(tool_turns|reuse_of_held|reuse_min_of_held)=' /tmp/tool-turns.out
echo "reuse_turns=$(IFS=,; echo "${turns[*]}")"
echo "reuse_continue=${ratio[continue]}"
echo "reuse_header_off=${ratio[off]}"
echo "reuse_header_on=${ratio[on]}"
REMOTE
