#!/bin/sh
# All GPU checks and benchmarks of KVIR on a machine with an NVIDIA GPU and
# its driver, from the bundle built here (`ninja kv-gpu-bundle`,
# docs/gpu-backend.md): no LLVM, MLIR, lit or FileCheck needed there. Usage:
#   run-on-gpu.sh BUNDLE_DIR [MODEL_FILE]
# BUNDLE_DIR is build/gpu-bundle; MODEL_FILE is stories260K.bin (default:
# BUNDLE_DIR/../../models-local/stories260K.bin). Prints every check it makes,
# every figure the docs promise with its target and whether it is met, a
# summary, and a last line ALL GPU CHECKS PASSED (exit 0) or SOME GPU CHECKS
# FAILED (exit 1). A target missed is reported, not a failed check.
#
# KVIR_GPU_STEP_TIMEOUT=S: each step's limit in seconds (default 300; the
# attention benchmark gets twice it). KVIR_GPU_KEEP=DIR: every run's report
# and dump is kept in DIR (default: a temporary folder, removed at the end).
# A run that fails prints its report (stdout) after the FAIL line.
#
# KVIR_GPU_CHECK_STUB=1: against the checking stub driver (the bundle's
# lib/libkvir-stub-cuda.so unless KVIR_CUDA_DRIVER names one), which runs no
# kernel: every run, launch and copy must succeed and the stub must refuse
# nothing, but results and timings are "not checked (stub)".
set -u
bundle=${1:?usage: run-on-gpu.sh BUNDLE_DIR [MODEL_FILE]}
model=${2:-$bundle/../../models-local/stories260K.bin}
run="$bundle/bin/kv-aot-run"
programs="$bundle/programs"
expect="$bundle/expect"
limit=${KVIR_GPU_STEP_TIMEOUT:-300}
keep=${KVIR_GPU_KEEP:-}
if [ -n "$keep" ]; then
  mkdir -p "$keep" || exit 1
  out=$keep
else
  out=$(mktemp -d)
fi
stub=${KVIR_GPU_CHECK_STUB:-0}
if [ "$stub" = 1 ]; then
  export KVIR_CUDA_DRIVER="${KVIR_CUDA_DRIVER:-$bundle/lib/libkvir-stub-cuda.so}"
  export KVIR_STUB_CUDA_LOG="${KVIR_STUB_CUDA_LOG:-$out/stub.log}"
  : > "$KVIR_STUB_CUDA_LOG"
  echo "== stub mode: driver $KVIR_CUDA_DRIVER (runs no kernel), log $KVIR_STUB_CUDA_LOG"
fi
passed=0 failed=0 unchecked=0 met=0 missed=0 runs=0

pass() { echo "PASS  $*"; passed=$((passed + 1)); }
fail() { echo "FAIL  $*"; failed=$((failed + 1)); }
unchecked() { echo "not checked (stub): $*"; unchecked=$((unchecked + 1)); }

# A command that must succeed (exit 0): its output, then PASS or FAIL.
step() {
  what=$1
  shift
  echo "== $what"
  if timeout "$limit" "$@"; then pass "$what"; else fail "$what (exit $?)"; fi
}

# The float32 values of a dump (4 bytes each).
values() { echo $(($(wc -c < "$1") / 4)); }

# GPU dump A against B (1e-3): kv-aot-run compare, which fails on an empty
# comparison; in stub mode, only that A has B's number of values.
compareDumps() {
  label=$1 a=$2 b=$3
  if [ "$stub" = 1 ]; then
    if [ "$(values "$a")" -gt 0 ] && [ "$(values "$a")" = "$(values "$b")" ]; then
      unchecked "$label: $(values "$a") values, as many as expected"
    else
      fail "$label: $(values "$a") values, $(values "$b") expected"
    fi
  elif "$run" compare "$a" "$b" --tolerance 1e-3; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
  fi
}

# One program entry on the GPU against the CPU backend's numbers: its tensor
# (1e-3) and, for entries that return logits, the greedy continuation of 8
# tokens (identical). The runner's model flags follow the entry.
check() {
  name=$1 entry=$2
  shift 2
  echo "== $name @$entry on the GPU vs the CPU backend"
  if ! timeout "$limit" "$run" "$programs/lib$name.so" --entry "$entry" \
      --backend cuda --synthesize-inputs --greedy 8 \
      --dump-logits "$out/$name-$entry.f32" "$@" > "$out/$name-$entry.txt"; then
    fail "$name @$entry: the run (exit $?)"
    sed 's/^/      | /' "$out/$name-$entry.txt"
    return
  fi
  runs=$((runs + 1))
  compareDumps "$name @$entry result" "$out/$name-$entry.f32" \
    "$expect/$name-$entry.f32"
  cpu=$(grep '^greedy continuation' "$expect/$name-$entry.txt")
  gpu=$(grep '^greedy continuation' "$out/$name-$entry.txt")
  if [ -z "$cpu" ]; then
    echo "      $name @$entry returns no logits: no greedy continuation"
  elif [ -z "$gpu" ]; then
    fail "$name @$entry greedy: the GPU run printed none"
  elif [ "$stub" = 1 ]; then
    unchecked "$name @$entry greedy"
  elif [ "$gpu" = "$cpu" ]; then
    pass "$name @$entry greedy: $gpu"
  else
    fail "$name @$entry greedy: gpu [$gpu] cpu [$cpu]"
  fi
}

# The checks of one checks-* program: its entries, and the attention over
# shifted runs against the same view materialized.
checkProgram() {
  name=$1
  shift
  for entry in edit compose attend attend_materialized; do
    check "$name" "$entry" "$@"
  done
  if [ -s "$out/$name-attend.f32" ] && [ -s "$out/$name-attend_materialized.f32" ]; then
    echo "== $name: shifted runs vs materialized keys, both on the GPU"
    compareDumps "$name shifted vs materialized" "$out/$name-attend.f32" \
      "$out/$name-attend_materialized.f32"
  fi
}

# A figure with no target: a plan's wall time against a full prefill of the
# same final context, from a --compare-full-prefill report.
recordFigure() {
  label=$1 report=$2
  row=$(grep 'wall time (ms)' "$report" | awk '{print $4, $5, $6}')
  if [ -z "$row" ]; then
    fail "$label: no wall time in the report"
    return
  fi
  set -- $row
  echo "figure: $label: plan $1 ms, full prefill $2 ms, plan/full $3 (recorded; no target)"
}

step "the device" "$run" info
if [ $failed -ne 0 ]; then
  echo "SOME GPU CHECKS FAILED: no usable GPU here, nothing else can run"
  exit 1
fi
device=$("$run" info 2>/dev/null | sed -n 's/^device: //p')

checkProgram checks-synthetic-test --synthetic synthetic-test
# f16 and bf16 pages (the pool takes the type from the program's manifest).
for dtype in f16 bf16; do
  checkProgram "checks-synthetic-test-$dtype" --synthetic synthetic-test
done
if [ -f "$model" ] && [ -f "$programs/libchecks-stories260k.so" ]; then
  checkProgram checks-stories260k --model "$model"
  check agent-edit main --model "$model"
  check compose-skills main --model "$model"
  step "agent-edit against a full prefill on the GPU" \
    "$run" "$programs/libagent-edit.so" --backend cuda --model "$model" \
    --synthesize-inputs --compare-full-prefill
else
  echo "== SKIPPED stories260K checks: no $model or no stories260K programs"
fi

# The no-driver path on this machine too: a clear error, exit status 2.
echo "== no-driver error path"
KVIR_CUDA_DRIVER=/nonexistent/libcuda.so.1 "$run" info
status=$?
if [ $status -eq 2 ]; then pass "no driver: exit 2"; else fail "no driver: exit $status"; fi

# The figures docs/gpu-backend.md promises. Decode attention over 16K keys of
# all 8 layers of synthetic-bench (bytes/s of K/V read; target 70% of an
# H200's 4.8 TB/s) and 16 shifted runs against one (target <= 1.1x); the edit
# and compose against a full prefill of the same final context (no target).
echo "== benchmarks"
if timeout $((2 * limit)) "$run" bench-attention "$programs/libchecks-synthetic-bench.so" \
    --entry attend --synthetic synthetic-bench --context 16384 --runs 16 \
    --iters 5 > "$out/bench.txt"; then
  pass "bench-attention ran"
  if [ "$stub" = 1 ]; then
    sed 's/: \(NOT \)\{0,1\}met$/: not checked (stub)/' "$out/bench.txt"
  else
    cat "$out/bench.txt"
  fi
  met=$(grep -c 'target: .*: met$' "$out/bench.txt")
  missed=$(grep -c 'target: .*: NOT met$' "$out/bench.txt")
else
  fail "bench-attention (exit $?)"
fi
for entry in edit compose; do
  if timeout "$limit" "$run" "$programs/libchecks-synthetic-bench.so" \
      --entry "$entry" --backend cuda --synthetic synthetic-bench \
      --synthesize-inputs --compare-full-prefill > "$out/bench-$entry.txt"; then
    pass "synthetic-bench @$entry against a full prefill ran"
    recordFigure "synthetic-bench @$entry" "$out/bench-$entry.txt"
  else
    fail "synthetic-bench @$entry against a full prefill (exit $?)"
    sed 's/^/      | /' "$out/bench-$entry.txt"
  fi
done

echo "== summary"
echo "device: $device"
if [ "$stub" = 1 ]; then
  refused=$(grep -c 'REFUSED\|FAULT' "$KVIR_STUB_CUDA_LOG")
  grep 'REFUSED\|FAULT' "$KVIR_STUB_CUDA_LOG"
  echo "stub driver: $(grep -c 'summary of pid' "$KVIR_STUB_CUDA_LOG") processes," \
    "$(awk '/summary of pid/ {n += $9} END {print n + 0}' "$KVIR_STUB_CUDA_LOG") launches," \
    "$(awk '/summary of pid/ {n += $11} END {print n + 0}' "$KVIR_STUB_CUDA_LOG") copies," \
    "$refused refusals and faults"
  if [ "$refused" -ne 0 ]; then fail "the stub driver refused calls or found faults"; fi
  echo "checks: $runs entries ran; $passed passed, $failed failed, $unchecked not checked (stub)"
  echo "targets: not checked (stub)"
else
  echo "checks: $runs entries ran; $passed passed, $failed failed"
  echo "targets: $met met, $missed not met"
fi
[ -n "$keep" ] || rm -rf "$out"
if [ $failed -eq 0 ]; then echo "ALL GPU CHECKS PASSED"; else echo "SOME GPU CHECKS FAILED"; fi
[ $failed -eq 0 ]
