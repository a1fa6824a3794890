#!/bin/bash
# decode-by-cpu.sh MODEL.gguf [CPU...]: a decode step's time on this machine
# of objects kv-aot builds for each CPU (default: haswell, an AVX2 machine
# without AVX-512, and native), so that the code a CPU without VNNI gets
# (quant-dot=avx2: docs/cpu-backend.md, "Quantised weights") is timed here
# next to this machine's own. Per object, kv-aot-run of the prefill program
# with --greedy 0 and --greedy N (N=160, env STEPS), one thread; a step is
# the difference of their wall times over N, the median of ROUNDS (env, 3;
# a slow start of either run moves one round, not the median).
# Builds from build/ (env BUILD); the model must have TinyLlama's shape
# (dim 2048, hidden 5632, 22 layers, 32/4 heads, vocabulary 32000).
set -euo pipefail
model=${1:?usage: decode-by-cpu.sh MODEL.gguf [CPU...]}
shift
cpus=("$@")
[ ${#cpus[@]} -eq 0 ] && cpus=(haswell native)
build=${BUILD:-build}
steps=${STEPS:-160}
rounds=${ROUNDS:-3}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
wall() { # LIB GREEDY: seconds
  local start end
  start=$(date +%s.%N)
  "$build/bin/kv-aot-run" "$1" --model "$model" --synthesize-inputs \
    --greedy "$2" --threads 1 > /dev/null
  end=$(date +%s.%N)
  echo "$end - $start" | bc -l
}
for cpu in "${cpus[@]}"; do
  "$build/bin/kv-aot" "$here/tinyllama-prefill.mlir" --target cpu --cpu "$cpu" \
    --model "$model" -o "$work/$cpu" --name p > /dev/null
done
for cpu in "${cpus[@]}"; do
  results=()
  for _ in $(seq "$rounds"); do
    zero=$(wall "$work/$cpu/libp.so" 0)
    many=$(wall "$work/$cpu/libp.so" "$steps")
    results+=("$(echo "($many - $zero) * 1000 / $steps" | bc -l)")
  done
  median=$(printf '%s\n' "${results[@]}" | sort -g | sed -n "$(((rounds + 1) / 2))p")
  printf '%-12s %.1f ms a decode step (median of %d rounds:' "$cpu" "$median" "$rounds"
  printf ' %.1f' "${results[@]}"
  printf ')\n'
done
