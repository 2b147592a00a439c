#!/bin/bash
# Publish the TurboQuant llama.cpp fork's source archive as a local git repository for tests and
# the embedded default (no GitHub needed). The llama_cpp role clones it with ansible.builtin.git,
# the same code path as for the real fork. Built once and cached; prints the bare repository's path.
#
#   llama-src.sh            build (or reuse) LLAMAFLEET_CACHE/git/llama.cpp.git and print its path
#   llama-src.sh info       print branches/tags and their commits
#
# The archive (LLAMAFLEET_FORK_ARCHIVE, default: ../shared/sources/ beside the project) is the fork's
# tree at its branch head; the .json beside it names branch, commit and build number. An archive has
# no history, and llama.cpp takes its build number from the commit count: the repository gets
# build_number - 1 empty placeholder commits, then one commit with the tree, so `git rev-list
# --count` (and `llama-server --version`) report the fork's build number. A commit id cannot be
# reproduced without the fork's history: the tip's message names the fork's commit.
#
# Refs (commits are deterministic: same archive => same hashes on every machine):
#   feature/turboquant-kv-cache, tag b<build>   the fork's tree at its build number
#   test/next                                   one extra commit (to test rebuilds): adds the server
#                                               option --llamafleet-test-next (accepted, ignored)
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
CACHE=${LLAMAFLEET_CACHE:-/var/cache/llamafleet}
ARCHIVE=${LLAMAFLEET_FORK_ARCHIVE:-$ROOT/../shared/sources/llama-cpp-turboquant-69d8e4be4.tar.gz}
META=${ARCHIVE%.tar.gz}.json
REPO=$CACHE/git/llama.cpp.git
PYTHON=${PYTHON:-python3}

log() { printf '%s\n' "$*" >&2; }

if [ "${1:-}" = info ]; then
  git -C "$REPO" for-each-ref --format='%(refname:short) %(objectname)' refs/heads refs/tags
  exit 0
fi

[ -s "$ARCHIVE" ] || { log "llama-src.sh: no fork archive at $ARCHIVE (set LLAMAFLEET_FORK_ARCHIVE)"; exit 1; }
[ -s "$META" ] || { log "llama-src.sh: no $META beside the archive"; exit 1; }
command -v git >/dev/null || { log "git is required"; exit 1; }

# branch, commit, build number and top directory, from the .json beside the archive
read -r BRANCH COMMIT BUILD TOP < <("$PYTHON" - "$META" <<'EOF'
import json, re, sys
m = json.load(open(sys.argv[1], encoding="utf-8"))
parts = [m["branch"], m["commit"], str(int(m["build_number"])), m["top_directory"]]
for p in parts:
    if not re.fullmatch(r"[A-Za-z0-9._/-]+", p) or ".." in p:
        sys.exit(f"{sys.argv[1]}: unexpected value {p!r}")
print(*parts)
EOF
)
SUM=$(sha256sum "$ARCHIVE" | cut -d' ' -f1)
STAMP="fork archive sha256=$SUM build=$BUILD recipe=4"

mkdir -p "$CACHE/git"
exec 9>"$CACHE/git/.llama-src.lock"; flock 9

if [ -f "$REPO/llamafleet-stamp" ] && [ "$(cat "$REPO/llamafleet-stamp")" = "$STAMP" ]; then
  echo "$REPO"; exit 0
fi

WORK=$(mktemp -d "$CACHE/git/.work.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
tar -xzf "$ARCHIVE" -C "$WORK"
SRC=$WORK/$TOP
[ -f "$SRC/CMakeLists.txt" ] || { log "no $TOP/CMakeLists.txt in $ARCHIVE"; exit 1; }

export GIT_AUTHOR_NAME="llamafleet" GIT_AUTHOR_EMAIL="llamafleet@localhost"
export GIT_COMMITTER_NAME="llamafleet" GIT_COMMITTER_EMAIL="llamafleet@localhost"
export GIT_AUTHOR_DATE="2026-05-04T15:37:40Z" GIT_COMMITTER_DATE="2026-05-04T15:37:40Z"
g() { git -C "$SRC" -c init.defaultBranch="$BRANCH" -c core.autocrlf=false -c commit.gpgsign=false "$@"; }
g init -q

# build - 1 empty placeholder commits, streamed into fast-import (a second or two)
"$PYTHON" - "$((BUILD - 1))" "$BRANCH" <<'EOF' | g fast-import --quiet
import sys
n, branch = int(sys.argv[1]), sys.argv[2]
out = sys.stdout.buffer
for i in range(1, n + 1):
    msg = f"history placeholder {i} of {n} (the source archive has no history)\n".encode()
    out.write(f"commit refs/heads/{branch}\nmark :{i}\n".encode())
    out.write(b"author llamafleet <llamafleet@localhost> 1777909060 +0000\n")
    out.write(b"committer llamafleet <llamafleet@localhost> 1777909060 +0000\n")
    out.write(b"data %d\n%s" % (len(msg), msg))
    if i > 1:
        out.write(f"from :{i - 1}\n".encode())
    out.write(b"\n")
EOF
g symbolic-ref HEAD "refs/heads/$BRANCH"
g add -A -f .
g commit -q -m "llama-cpp-turboquant $COMMIT ($BRANCH, build $BUILD) from the source archive" \
  -m "The fork's tree at commit $COMMIT. The $((BUILD - 1)) commits before this one are empty placeholders that give the build number; the fork's history is not in the archive."
[ "$(g rev-list --count HEAD)" = "$BUILD" ] || { log "commit count is not $BUILD"; exit 1; }
g tag "b$BUILD"
g checkout -q -b test/next
# test/next: one more commit, with a server option only this build knows (--llamafleet-test-next,
# accepted and ignored), so a test can move a host to a build with new flags in one run
echo "an extra commit so tests can move a ref" > "$SRC/LLAMAFLEET-TEST-NEXT"
"$PYTHON" - "$SRC/common/arg.cpp" <<'EOF2'
import sys
path = sys.argv[1]
src = open(path, encoding="utf-8").read()
anchor = '.set_env("LLAMA_ARG_ENDPOINT_SLOTS"));\n'
if src.count(anchor) != 1:
    sys.exit(f"{path}: the --slots option is not where test/next expects it")
opt = (
    "    add_opt(common_arg(\n"
    '        {"--llamafleet-test-next"},\n'
    '        "accepted and ignored (a test option of llamafleet\'s test/next build)",\n'
    "        [](common_params &) {}\n"
    "    ).set_examples({LLAMA_EXAMPLE_SERVER}));\n"
)
open(path, "w", encoding="utf-8").write(src.replace(anchor, anchor + opt))
EOF2
g add LLAMAFLEET-TEST-NEXT common/arg.cpp
GIT_AUTHOR_DATE="2026-05-05T00:00:00Z" GIT_COMMITTER_DATE="2026-05-05T00:00:00Z" \
  g commit -q -m "test: move the ref"
g checkout -q "$BRANCH"

rm -rf "$REPO.tmp"
git clone -q --bare "$SRC" "$REPO.tmp"
git -C "$REPO.tmp" update-server-info   # lets a plain HTTP server serve it (dumb protocol)
echo "$STAMP" > "$REPO.tmp/llamafleet-stamp"
rm -rf "$REPO"; mv "$REPO.tmp" "$REPO"
log "made $REPO:"
git -C "$REPO" for-each-ref --format='  %(refname:short) %(objectname)' refs/heads refs/tags >&2
echo "$REPO"
