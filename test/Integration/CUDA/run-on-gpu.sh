#!/bin/sh
# All GPU checks and benchmarks of KVIR on a machine with an NVIDIA GPU and
# its driver, from the bundle built here (docs/gpu-backend.md): no LLVM, MLIR,
# lit or FileCheck needed there. Usage:
#   run-on-gpu.sh BUNDLE_DIR [MODEL_FILE]
# BUNDLE_DIR is build/gpu-bundle (bin/kv-gpu-run, lib/); MODEL_FILE is
# stories260K.bin (default: BUNDLE_DIR/../../models-local/stories260K.bin).
# Prints every check it makes; exits non-zero if one fails. About a minute.
set -u
bundle=${1:?usage: run-on-gpu.sh BUNDLE_DIR [MODEL_FILE]}
model=${2:-$bundle/../../models-local/stories260K.bin}
run="$bundle/bin/kv-gpu-run"
kernels="$bundle/lib/kvir-gpu"
export KVIR_GPU_KERNELS="$kernels"
failed=0
step() {
  echo "== $*"
  if timeout 240 "$@"; then echo "-- ok"; else echo "-- FAILED ($?)"; failed=1; fi
}

step "$run" info
step "$run" check --synthetic synthetic-test \
  --expect "$kernels/expect-synthetic-test.bin" --tolerance 1e-3
if [ -f "$model" ] && [ -f "$kernels/expect-stories260k.bin" ]; then
  step "$run" check --model "$model" \
    --expect "$kernels/expect-stories260k.bin" --tolerance 1e-3
else
  echo "== SKIPPED stories260K check: no $model (copy it there, see docs/gpu-backend.md)"
fi
# The no-driver path on this machine too: a clear error, exit status 2.
echo "== no-driver error path"
KVIR_CUDA_DRIVER=/nonexistent/libcuda.so.1 "$run" check --synthetic synthetic-test
if [ $? -eq 2 ]; then echo "-- ok"; else echo "-- FAILED"; failed=1; fi
step "$run" bench --context 16384 --iters 5
if [ $failed -eq 0 ]; then echo "ALL GPU CHECKS PASSED"; else echo "SOME GPU CHECKS FAILED"; fi
exit $failed
