#!/usr/bin/env bash
# Makes the tokenizer goldens (goldens/NAME.golden) with llama.cpp, the
# reference implementation, which is not a dependency of KVIR:
#
#   test/golden/tokenizer/make-goldens.sh [--peer DIR]
#
# llama.cpp comes from npm, as prebuilt binaries: `npm pack` fetches
# @node-llama-cpp/linux-x64@3.22.1 (libllama.v0.5.0.so and libggml*.so in
# package/bins/linux-x64/) and node-llama-cpp@3.22.1 (the llama.cpp source of
# the same release, as the git bundle package/llama/gitRelease.bundle, for
# llama.h and ggml.h). --peer DIR uses a folder holding both unpacked
# instead (DIR/bin/package/bins/linux-x64 and DIR/llama.cpp/include, as
# /work/peer has them). Without npm (and without --peer) the script says it
# skipped and exits 0.
#
# It builds golden-maker.cpp against them, writes the vocabularies with
# make-vocabs.py (vocabulary-only GGUF files, from the committed merges) and
# runs golden-maker on each with texts.txt. The goldens are committed;
# test/unit/core/TokenizerGoldenTest.cpp compares KVIR's ids with them.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
peer=
if [ "${1:-}" = --peer ]; then
  peer=$(cd "$2" && pwd)
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

. "$here/../../../bench/peer/fetch-llama.sh"
if ! fetch_llama make-goldens "$work" "$peer"; then
  exit 0
fi
libs=$llama_libs
includes=("-I$llama_src/include" "-I$llama_src/ggml/include")

c++ -std=c++17 -O1 "${includes[@]}" "$here/golden-maker.cpp" -o "$work/golden-maker" \
  -L"$libs" -l:libllama.v0.5.0.so -l:libggml.v0.5.0.so -l:libggml-base.so \
  -Wl,-rpath,"$libs"
python3 "$here/make-vocabs.py" gguf "$work/vocabs"
mkdir -p "$here/goldens"
for vocab in "$work"/vocabs/*.gguf; do
  name=$(basename "$vocab" .gguf)
  "$work/golden-maker" "$vocab" "$here/texts.txt" > "$here/goldens/$name.golden"
  echo "make-goldens: $name: $(wc -l < "$here/goldens/$name.golden") texts"
done
