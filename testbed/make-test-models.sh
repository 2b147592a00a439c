#!/bin/bash
# Write the tiny test models into DIR (served to the test hosts), each with its .sha256:
#   tiny-llama.gguf            the model every scenario serves (answers "OK" and stops)
#   tiny-llama-gqa6.gguf       GQA ratio 6: the fork's automatic q8_0 K with turbo V types
#   tiny-qwen35moe.gguf        the seed's architecture (attention + recurrent layers, experts)
#   tiny-llama-truncated.gguf  the first half of tiny-llama.gguf (a model that does not load)
#   tiny-llama-qwen35.gguf     tiny-llama with the official Qwen3.5 chat template, read from the
#                              fork's source archive (models/templates/Qwen3.5-4B.jinja): it raises
#                              on Claude Code's late system message
# The generator is deterministic: a file is replaced only when its bytes change, so a running
# HTTP server and the checksums in inventories stay consistent.
#
#   make-test-models.sh DIR
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
ARCHIVE=${LLAMAFLEET_FORK_ARCHIVE:-$ROOT/../shared/sources/llama-cpp-turboquant-69d8e4be4.tar.gz}
PYTHON=${PYTHON:-python3}
DIR=${1:?usage: make-test-models.sh DIR}
mkdir -p "$DIR"
TMP=$(mktemp -d "$DIR/.make.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

"$PYTHON" "$HERE/make-tiny-model.py" "$TMP/tiny-llama.gguf"
"$PYTHON" "$HERE/make-tiny-model.py" "$TMP/tiny-llama-gqa6.gguf" --gqa-ratio 6
"$PYTHON" "$HERE/make-tiny-model.py" "$TMP/tiny-qwen35moe.gguf" --arch qwen35moe
[ -s "$ARCHIVE" ] || { echo "make-test-models.sh: no fork archive at $ARCHIVE (set LLAMAFLEET_FORK_ARCHIVE)" >&2; exit 1; }
tar -xzOf "$ARCHIVE" --wildcards '*/models/templates/Qwen3.5-4B.jinja' > "$TMP/qwen35.jinja"
[ -s "$TMP/qwen35.jinja" ] || { echo "make-test-models.sh: no models/templates/Qwen3.5-4B.jinja in $ARCHIVE" >&2; exit 1; }
"$PYTHON" "$HERE/make-tiny-model.py" "$TMP/tiny-llama-qwen35.gguf" --chat-template-file "$TMP/qwen35.jinja"
head -c "$(( $(stat -c %s "$TMP/tiny-llama.gguf") / 2 ))" "$TMP/tiny-llama.gguf" > "$TMP/tiny-llama-truncated.gguf"

changed=0
for f in "$TMP"/*.gguf; do
  name=$(basename "$f")
  sha256sum "$f" | cut -d' ' -f1 > "$f.sha256"
  for g in "$name" "$name.sha256"; do
    if ! cmp -s "$TMP/$g" "$DIR/$g"; then
      chmod 0644 "$TMP/$g"; mv -f "$TMP/$g" "$DIR/$g"; changed=1
    fi
  done
done
echo "changed=$changed"
