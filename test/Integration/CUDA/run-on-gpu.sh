#!/bin/sh
# All GPU checks and benchmarks of KVIR on a machine with an NVIDIA GPU and
# its driver, from the bundle built here (`ninja kv-gpu-bundle`,
# docs/gpu-backend.md): no LLVM, MLIR, lit or FileCheck needed there. Usage:
#   run-on-gpu.sh BUNDLE_DIR [MODEL_FILE]
# BUNDLE_DIR is build/gpu-bundle; MODEL_FILE is stories260K.bin (default:
# BUNDLE_DIR/../../models-local/stories260K.bin). Prints every check it makes
# and a last line ALL GPU CHECKS PASSED or SOME GPU CHECKS FAILED (exit 1).
set -u
bundle=${1:?usage: run-on-gpu.sh BUNDLE_DIR [MODEL_FILE]}
model=${2:-$bundle/../../models-local/stories260K.bin}
run="$bundle/bin/kv-aot-run"
programs="$bundle/programs"
expect="$bundle/expect"
out=$(mktemp -d)
failed=0
step() {
  echo "== $*"
  if timeout 300 "$@"; then echo "-- ok"; else echo "-- FAILED ($?)"; failed=1; fi
}

# One program entry on the GPU against the CPU backend's numbers (1e-3) and
# greedy continuation (8 tokens), with the runner's model flags after it.
check() {
  name=$1 entry=$2
  shift 2
  echo "== $name @$entry on the GPU vs the CPU backend"
  if ! timeout 300 "$run" "$programs/lib$name.so" --entry "$entry" \
      --backend cuda --synthesize-inputs --greedy 8 \
      --dump-logits "$out/$name-$entry.f32" "$@" > "$out/$name-$entry.txt"; then
    echo "-- FAILED (the run)"; failed=1; return
  fi
  if ! "$run" compare "$out/$name-$entry.f32" "$expect/$name-$entry.f32" \
      --tolerance 1e-3; then
    failed=1
  fi
  gpu=$(grep '^greedy continuation' "$out/$name-$entry.txt")
  cpu=$(grep '^greedy continuation' "$expect/$name-$entry.txt")
  if [ "$gpu" = "$cpu" ]; then echo "PASS  greedy: $gpu"
  else echo "FAIL  greedy: gpu [$gpu] cpu [$cpu]"; failed=1; fi
}

step "$run" info
if [ $failed -ne 0 ]; then
  echo "SOME GPU CHECKS FAILED: no usable GPU here, nothing else can run"
  exit 1
fi
for entry in edit compose attend; do
  check checks-synthetic-test "$entry" --synthetic synthetic-test
done
# f16 and bf16 pages (the pool takes the type from the program's manifest).
for dtype in f16 bf16; do
  for entry in edit compose attend; do
    check "checks-synthetic-test-$dtype" "$entry" --synthetic synthetic-test
  done
done
if [ -f "$model" ] && [ -f "$programs/libchecks-stories260k.so" ]; then
  for entry in edit compose attend; do
    check checks-stories260k "$entry" --model "$model"
  done
  check agent-edit main --model "$model"
  check compose-skills main --model "$model"
  step "$run" "$programs/libagent-edit.so" --backend cuda --model "$model" \
    --synthesize-inputs --compare-full-prefill
else
  echo "== SKIPPED stories260K checks: no $model or no stories260K programs"
fi

# The no-driver path on this machine too: a clear error, exit status 2.
echo "== no-driver error path"
KVIR_CUDA_DRIVER=/nonexistent/libcuda.so.1 "$run" info
if [ $? -eq 2 ]; then echo "-- ok"; else echo "-- FAILED"; failed=1; fi

# Benchmarks: decode attention over 16K keys (bytes/s of K/V read), 16
# shifted runs against one; edit and compose against a full prefill.
step "$run" bench-attention "$programs/libchecks-synthetic-bench.so" \
  --synthetic synthetic-bench --context 16384 --runs 16 --iters 5
for entry in edit compose; do
  step "$run" "$programs/libchecks-synthetic-bench.so" --entry "$entry" \
    --backend cuda --synthetic synthetic-bench --synthesize-inputs \
    --compare-full-prefill
done
rm -rf "$out"
if [ $failed -eq 0 ]; then echo "ALL GPU CHECKS PASSED"; else echo "SOME GPU CHECKS FAILED"; fi
exit $failed
