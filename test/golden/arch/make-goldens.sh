#!/usr/bin/env bash
# The logits goldens of the architectures (qwen2, Llama 3): llama.cpp's
# logits for the token list tokens.txt on each model of models.txt, a GGUF
# file kv-convert writes from a seeded synthetic model with a byte-level BPE
# vocabulary of test/golden/tokenizer. Written to NAME.f32 ([n][vocab]
# little-endian float32, as kv-run --dump-logits writes them) and
# committed; the test (arch-goldens.test) remakes the files and holds KVIR's
# generated CPU code and its oracle to them. llama.cpp is never a test
# dependency: this script fetches it (bench/peer/fetch-llama.sh) or takes
# --peer DIR.
#
#   test/golden/arch/make-goldens.sh [--peer DIR] [--build DIR]
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
peer=
build=$root/build
while [ $# -gt 0 ]; do
  case "$1" in
  --peer) peer=$(cd "$2" && pwd); shift 2 ;;
  --build) build=$(cd "$2" && pwd); shift 2 ;;
  *) echo "make-goldens: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

. "$root/bench/peer/fetch-llama.sh"
if ! fetch_llama make-goldens "$work" "$peer"; then
  exit 1
fi
build_llama_tool "$root/bench/peer/llama-logits.cpp" "$work/llama-logits"

python3 "$root/test/golden/tokenizer/make-vocabs.py" gguf "$work/vocabs"
tokens=$(cat "$here/tokens.txt")
grep -v '^#' "$here/models.txt" | while read -r name vocab spec; do
  "$build/bin/kv-convert" "synthetic:$spec" "$work/$name.gguf" \
    --tokenizer "$work/vocabs/$vocab.gguf" >/dev/null
  "$work/llama-logits" "$work/$name.gguf" "$tokens" "$here/$name.f32" 1 \
    2>"$work/$name.err" || { cat "$work/$name.err" >&2; exit 1; }
  echo "make-goldens: $name.f32"
done
