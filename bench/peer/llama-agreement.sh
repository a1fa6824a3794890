#!/usr/bin/env bash
# Do the GGUF files kv-convert writes load in llama.cpp, and does llama.cpp
# read and compute them as KVIR does? (docs/models.md, "Checked against
# llama.cpp".) Not a test dependency: llama.cpp is the reference, fetched
# for this check only.
#
#   bench/peer/llama-agreement.sh [--peer DIR] [--build DIR] [--models DIR]
#
# llama.cpp comes from npm as prebuilt binaries, as for the tokenizer
# goldens (fetch-llama.sh): @node-llama-cpp/linux-x64@3.22.1 (libllama,
# libggml and the CPU backends) and node-llama-cpp@3.22.1 (the llama.cpp
# source of the same release, for llama.h, ggml.h and gguf.h). --peer DIR
# uses a folder holding both unpacked instead (DIR/bin/package/bins/linux-x64
# and DIR/llama.cpp). Without npm (and without --peer) the script says it
# skipped and exits 0. --build is KVIR's
# build folder (default build), --models the folder of stories260K.bin and
# tok512.bin (default ../shared/models).
#
# For stories260K and for a synthetic model of dim 256 (rows of whole K-quant
# blocks), in every format kv-convert writes, it prints:
#   dequant  how many weights ggml's own dequantisation (to_float) of the file
#            gives differently from KVIR's (kv-convert FILE.gguf FILE.bin)
#   logits   max |logit diff| and top-1 agreement over a 64-token prefill:
#            llama.cpp against KVIR's generated CPU code, and each against
#            KVIR's oracle on the same file (exact dequantised weights, f64
#            accumulation): llama.cpp multiplies quantised weights with its
#            activations quantised per block (Q8_0, Q8_K) or rounded to f16,
#            KVIR in f32.
# Then the same models' files written by llama.cpp's quantiser
# (llama_model_quantize, no importance matrix) from the same F32 GGUF: the
# formats it chose, whether KVIR reads the file, the logits as above, and
# the RMS error of each quantiser's weights against the f32 ones (all
# weights; norms stay f32 in both), and each one's logits on its own file
# against the f32 model's (the oracle on the F32 GGUF).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
peer=
build=$root/build
models=$root/../shared/models
while [ $# -gt 0 ]; do
  case "$1" in
  --peer) peer=$(cd "$2" && pwd); shift 2 ;;
  --build) build=$(cd "$2" && pwd); shift 2 ;;
  --models) models=$(cd "$2" && pwd); shift 2 ;;
  *) echo "llama-agreement: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

. "$here/fetch-llama.sh"
if ! fetch_llama llama-agreement "$work" "$peer"; then
  exit 0
fi
libs=$llama_libs
build_llama_logits "$work"

# 64 tokens: the start of stories260K's greedy list (beside the model),
# verbatim (no BOS added by either side).
tokens=$(tr -s ' \n' '  ' < "$models/stories260K.greedy81.tokens.txt" |
  cut -d' ' -f1-64)

py() { python3 "$here/agreement.py" "$@"; }

# Logits of FILE from llama.cpp, KVIR's generated code and KVIR's oracle.
logits() { # FILE.gguf
  "$work/llama-logits" "$1" "$tokens" "$work/llama.f32" 1 2>"$work/llama.err"
  "$build/bin/kv-run" --model "$1" --tokens "$tokens" \
    --dump-logits "$work/kvir.f32" >/dev/null
  "$build/bin/kv-run" --model "$1" --tokens "$tokens" --backend reference \
    --dump-logits "$work/oracle.f32" >/dev/null
}

row() { # NAME FILE.gguf
  if ! logits "$2"; then
    echo "| $1 | llama.cpp cannot load it: $(grep -m1 error "$work/llama.err") |"
    return
  fi
  "$work/llama-logits" --dequantize "$2" "$work/ggml.f32"
  "$build/bin/kv-convert" "$2" "$work/kvir.bin" >/dev/null
  echo "| $1 | $(py dequant "$work/kvir.bin" "$work/ggml.f32") |" \
    "$(py logits "$work/llama.f32" "$work/kvir.f32" 512) |" \
    "$(py logits "$work/kvir.f32" "$work/oracle.f32" 512) |" \
    "$(py logits "$work/llama.f32" "$work/oracle.f32" 512) |"
}

quantised() { # NAME F32.gguf KVIR-TYPE LLAMA-FTYPE
  local mine=$work/mine.gguf theirs=$work/theirs.gguf
  "$build/bin/kv-convert" "$2" "$work/f32.bin" >/dev/null
  # Each quantiser's file against the f32 model: llama.cpp runs its own,
  # KVIR its own (the oracle on the F32 GGUF is the reference).
  "$build/bin/kv-run" --model "$2" --tokens "$tokens" --backend reference \
    --dump-logits "$work/f32.f32" >/dev/null
  "$build/bin/kv-convert" "$2" "$mine" --type "$3" >/dev/null
  "$build/bin/kv-convert" "$mine" "$work/mine.bin" >/dev/null
  "$build/bin/kv-run" --model "$mine" --tokens "$tokens" \
    --dump-logits "$work/mine.f32" >/dev/null
  local accuracyMine
  accuracyMine=$(py logits "$work/mine.f32" "$work/f32.f32" 512)
  "$work/llama-logits" --quantize "$2" "$theirs" "$4" >/dev/null 2>&1
  local formats
  formats=$(py formats "$theirs")
  if ! "$build/bin/kv-convert" "$theirs" "$work/theirs.bin" \
    >"$work/read.txt" 2>&1; then
    "$work/llama-logits" "$theirs" "$tokens" "$work/llama.f32" 1 2>/dev/null
    echo "| $1 | $formats | no: $(sed 's/^kv-convert: error: //' "$work/read.txt" | head -1) | | | | $(py rms "$work/f32.bin" "$work/mine.bin") | $(py logits "$work/llama.f32" "$work/f32.f32" 512) | $accuracyMine |"
    return
  fi
  logits "$theirs"
  echo "| $1 | $formats | yes |" \
    "$(py logits "$work/llama.f32" "$work/kvir.f32" 512) |" \
    "$(py logits "$work/kvir.f32" "$work/oracle.f32" 512) |" \
    "$(py rms "$work/f32.bin" "$work/theirs.bin") |" \
    "$(py rms "$work/f32.bin" "$work/mine.bin") |" \
    "$(py logits "$work/llama.f32" "$work/f32.f32" 512) |" \
    "$accuracyMine |"
}

echo "llama.cpp: @node-llama-cpp/linux-x64@3.22.1 ($libs); KVIR: $build"
echo "64 tokens prefilled from position 0; logits: max |diff|, top-1 agreement"
echo
echo "Files written by kv-convert:"
echo
echo "| file | weights ggml dequantises otherwise than KVIR | llama.cpp vs KVIR | KVIR vs its oracle | llama.cpp vs KVIR's oracle |"
echo "| --- | --- | --- | --- | --- |"
synthetic=synthetic:dim=256,hidden=768,layers=4,heads=4,kv_heads=2,vocab=512,shared=0
for type in f32 f16 bf16 q8_0 q4_0 q4_k_m q5_k_m; do
  "$build/bin/kv-convert" "$models/stories260K.bin" "$work/s.$type.gguf" \
    --type "$type" --tokenizer "$models/tok512.bin" >/dev/null
  row "stories260K $type" "$work/s.$type.gguf"
done
for type in f32 f16 q8_0 q4_0 q4_k q5_k q6_k q4_k_m q5_k_m; do
  "$build/bin/kv-convert" "$synthetic" "$work/d.$type.gguf" \
    --type "$type" --tokenizer "$models/tok512.bin" >/dev/null
  row "synthetic dim 256 $type" "$work/d.$type.gguf"
done

echo
echo "Files written by llama.cpp's quantiser from the same F32 GGUF:"
echo
echo "| model, type | llama.cpp's matrices | KVIR reads it | llama.cpp vs KVIR | KVIR vs its oracle | RMS error, llama.cpp's quantiser | RMS error, KVIR's | llama.cpp on its file vs f32 | KVIR on its file vs f32 |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for pair in q8_0:7 q4_0:2 q4_k_m:15; do
  quantised "stories260K ${pair%%:*}" "$work/s.f32.gguf" "${pair%%:*}" "${pair##*:}"
done
for pair in q8_0:7 q4_0:2 q6_k:18 q4_k_m:15 q5_k_m:17; do
  quantised "synthetic dim 256 ${pair%%:*}" "$work/d.f32.gguf" "${pair%%:*}" "${pair##*:}"
done
