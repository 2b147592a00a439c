#!/bin/bash
# Make a local git repository of llama.cpp for tests, from the llama.cpp source that the PyPI sdist of
# llama-cpp-python vendors (no GitHub needed). The llama_cpp role clones it with ansible.builtin.git,
# the same code path as for a real fork. Built once and cached; prints the bare repository's path.
#
#   llama-src.sh            build (or reuse) LLAMAFLEET_CACHE/git/llama.cpp.git and print its path
#   llama-src.sh info       print branches/tags and their commits
#
# Refs in the repository (commits are deterministic: same sdist => same hashes on every machine):
#   master, feature/turboquant-kv-cache, tag sdist-<version>   the vendored source as-is
#   test/next                                                  one extra commit (to test rebuilds)
set -euo pipefail

CACHE=${LLAMAFLEET_CACHE:-/var/cache/llamafleet}
VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
PYTHON=${PYTHON:-python3}
DIST=$CACHE/dist
REPO=$CACHE/git/llama.cpp.git
STAMP="llama-cpp-python==$VERSION recipe=2"

log() { printf '%s\n' "$*" >&2; }

if [ "${1:-}" = info ]; then
  git -C "$REPO" for-each-ref --format='%(refname:short) %(objectname)' refs/heads refs/tags
  exit 0
fi

mkdir -p "$DIST" "$CACHE/git"
exec 9>"$CACHE/git/.llama-src.lock"; flock 9

if [ -f "$REPO/llamafleet-stamp" ] && [ "$(cat "$REPO/llamafleet-stamp")" = "$STAMP" ]; then
  echo "$REPO"; exit 0
fi

command -v git >/dev/null || { log "git is required"; exit 1; }
SDIST=$DIST/llama_cpp_python-$VERSION.tar.gz
if [ ! -s "$SDIST" ]; then
  log "downloading llama-cpp-python==$VERSION sdist"
  "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$DIST.tmp.$$" >&2
  mv "$DIST.tmp.$$"/llama_cpp_python-"$VERSION".tar.gz "$SDIST"; rm -rf "$DIST.tmp.$$"
fi

WORK=$(mktemp -d "$CACHE/git/.work.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
tar -xzf "$SDIST" -C "$WORK" "llama_cpp_python-$VERSION/vendor/llama.cpp"
SRC=$WORK/llama_cpp_python-$VERSION/vendor/llama.cpp
[ -f "$SRC/CMakeLists.txt" ] || { log "no vendor/llama.cpp in $SDIST"; exit 1; }
rm -rf "$SRC/.git"   # the sdist keeps a submodule link that points nowhere

export GIT_AUTHOR_NAME="llamafleet" GIT_AUTHOR_EMAIL="llamafleet@localhost"
export GIT_COMMITTER_NAME="llamafleet" GIT_COMMITTER_EMAIL="llamafleet@localhost"
export GIT_AUTHOR_DATE="2026-10-01T00:00:00Z" GIT_COMMITTER_DATE="2026-10-01T00:00:00Z"
g() { git -C "$SRC" -c init.defaultBranch=master -c core.autocrlf=false -c commit.gpgsign=false "$@"; }
g init -q
g add -A -f .
g commit -q -m "llama.cpp as vendored by llama-cpp-python $VERSION"
g tag "sdist-$VERSION"
g branch feature/turboquant-kv-cache
g checkout -q -b test/next
echo "an extra commit so tests can move a ref" > "$SRC/LLAMAFLEET-TEST-NEXT"
g add LLAMAFLEET-TEST-NEXT
GIT_AUTHOR_DATE="2026-10-02T00:00:00Z" GIT_COMMITTER_DATE="2026-10-02T00:00:00Z" \
  g commit -q -m "test: move the ref"
g checkout -q master

rm -rf "$REPO.tmp"
git clone -q --bare "$SRC" "$REPO.tmp"
git -C "$REPO.tmp" update-server-info   # lets a plain HTTP server serve it (dumb protocol)
echo "$STAMP" > "$REPO.tmp/llamafleet-stamp"
rm -rf "$REPO"; mv "$REPO.tmp" "$REPO"
# A copy of the vocab the test model generator copies its tokenizer from.
rm -rf "$CACHE/git/vocab"; mkdir -p "$CACHE/git/vocab"
cp "$SRC"/models/ggml-vocab-llama-spm.gguf "$CACHE/git/vocab/"
log "made $REPO:"
git -C "$REPO" for-each-ref --format='  %(refname:short) %(objectname)' refs/heads refs/tags >&2
echo "$REPO"
