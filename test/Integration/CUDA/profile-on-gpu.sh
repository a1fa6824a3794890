#!/bin/sh
# The GPU figures beyond run-on-gpu.sh's, in one call (docs/gpu-backend.md):
# decode attention at 4K, 16K and 64K keys, the runtime calls of
# synthetic-bench @edit and @compose by location (--profile) next to a full
# prefill, and, where Nsight Compute is,
# each kernel's time for a decode attention and for a prefill, and ncu's
# sections for attn_tile_one. Usage:
#   profile-on-gpu.sh BUNDLE_DIR [OUT_DIR]
# OUT_DIR (default: a temporary folder) keeps ncu's full reports:
# kernel-times.txt, ncu-attn.txt. Exit status 1 if a benchmark failed.
# KVIR_PROFILE_NCU names ncu (default: on PATH, else the CUDA toolkit's);
# KVIR_PROFILE_CONTEXTS the keys of the benchmarks (default "4096 16384
# 65536").
set -u
bundle=${1:?usage: profile-on-gpu.sh BUNDLE_DIR [OUT_DIR]}
out=${2:-$(mktemp -d)}
mkdir -p "$out" || exit 1
run="$bundle/bin/kv-aot-run"
lib="$bundle/programs/libchecks-synthetic-bench.so"
bench="--entry attend --synthetic synthetic-bench"
status=0

"$run" info || exit 1
for context in ${KVIR_PROFILE_CONTEXTS:-4096 16384 65536}; do
  echo "== decode attention, $context keys"
  if ! timeout 120 "$run" bench-attention "$lib" $bench --context "$context" \
      --runs 16 --iters 10 | grep -v '^device:\|^model:'; then
    echo "FAIL  bench-attention at $context keys"
    status=1
  fi
done

for entry in edit compose; do
  echo "== synthetic-bench @$entry: runtime calls (--profile) and a full prefill"
  if ! timeout 120 "$run" "$lib" --entry "$entry" --backend cuda \
      --synthetic synthetic-bench --synthesize-inputs --profile \
      --compare-full-prefill --greedy 0 | sed -n '/^work:/,/^fidelity/p'; then
    echo "FAIL  synthetic-bench @$entry --profile"
    status=1
  fi
done

ncu=${KVIR_PROFILE_NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
if [ ! -x "$ncu" ]; then
  echo "== ncu: not found ($ncu): no kernel times"
  exit $status
fi

# Sums ncu's gpu__time_duration per kernel: "NAME N launches T us".
sumTimes() {
  grep -E '^  [a-z_0-9]+ \(|gpu__time_duration' | paste - - |
    awk '{k = $1; v = $NF; u = $(NF - 1); gsub(",", "", v)
          if (u == "ms") v *= 1000; if (u == "ns") v /= 1000
          s[k] += v; c[k]++}
         END {for (k in s) printf "%-16s %5d launches %10.1f us\n", k, c[k], s[k]}' |
    sort -k4 -rn
}

echo "== kernel times: one decode attention call over 16K keys (layer 0)"
timeout 120 "$ncu" --kernel-name regex:attn --launch-skip 2 --launch-count 2 \
  --metrics gpu__time_duration.sum "$run" bench-attention "$lib" $bench \
  --context 16384 --runs 1 --iters 1 2>&1 | sumTimes | tee "$out/kernel-times.txt"
echo "== kernel times: synthetic-bench @compose (prefills, compose, logits)"
timeout 180 "$ncu" --metrics gpu__time_duration.sum "$run" \
  "$bundle/programs/libchecks-synthetic-bench.so" --entry compose \
  --backend cuda --synthetic synthetic-bench --synthesize-inputs 2>&1 |
  sumTimes | tee -a "$out/kernel-times.txt"
echo "== attn_tile_one over 16K keys: ncu sections in $out/ncu-attn.txt"
timeout 120 "$ncu" --kernel-name regex:attn_tile_one --launch-skip 1 \
  --launch-count 1 --section SpeedOfLight --section Occupancy \
  --section WarpStateStats --section MemoryWorkloadAnalysis \
  --section LaunchStats "$run" bench-attention "$lib" $bench --context 16384 \
  --runs 1 --iters 1 > "$out/ncu-attn.txt" 2>&1
grep -E 'Duration|Memory Throughput|Registers Per Thread|Achieved Occupancy|Warp Cycles Per Issued' \
  "$out/ncu-attn.txt"
exit $status
