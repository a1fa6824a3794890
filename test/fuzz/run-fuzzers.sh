#!/usr/bin/env bash
# Runs every fuzz target of a KVIR_BUILD_FUZZERS build for a while and prints
# what each did (docs/testing.md):
#
#   test/fuzz/run-fuzzers.sh BUILD_DIR [SECONDS_PER_TARGET=60] [TARGET...]
#
# Targets run side by side, one per core ($KVIR_FUZZ_JOBS to say how many).
# Each target starts from its checked-in seed corpus (test/fuzz/corpus/NAME)
# in a scratch copy, so the tree is never written. An input that crashes,
# leaks, hangs (-timeout) or trips a sanitizer is kept under
# BUILD_DIR/fuzz-artifacts/NAME/; the script then exits 1. Replay one with
# BUILD_DIR/bin/kv-fuzz-NAME FILE.
set -uo pipefail

if [ $# -lt 1 ]; then
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
build=$(cd "$1" && pwd) || exit 2
seconds=${2:-60}
shift $(( $# >= 2 ? 2 : 1 ))
here=$(cd "$(dirname "$0")" && pwd)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(model-loader gguf tokenizer token-list block-blob program exec serve-request)

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
jobs=${KVIR_FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}
[ "$jobs" -ge 1 ] 2>/dev/null || jobs=1
for name in "${targets[@]}"; do
  bin="$build/bin/kv-fuzz-$name"
  if [ ! -x "$bin" ]; then
    echo "run-fuzzers: $bin not built (configure with -DKVIR_BUILD_FUZZERS=ON)" >&2
    exit 2
  fi
done

# Fuzzes one target; writes its row of the table to $scratch/NAME.row and,
# when it failed, the report to $scratch/NAME.report.
fuzz() {
  local name=$1
  local bin="$build/bin/kv-fuzz-$name"
  local corpus="$scratch/corpus/$name"
  local artifacts="$build/fuzz-artifacts/$name"
  mkdir -p "$corpus" "$artifacts"
  local log="$build/fuzz-artifacts/$name.log"
  "$bin" -max_total_time="$seconds" -timeout=60 -rss_limit_mb=4096 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" \
    "$corpus" "$here/corpus/$name" >"$log" 2>&1
  local rc=$?
  local execs rate size found result
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  size=$(find "$corpus" -type f | wc -l)
  found=$(find "$artifacts" -type f | wc -l)
  if [ $rc -eq 0 ] && [ "$found" -eq 0 ]; then
    result=ok
  else
    result="FAILED (exit $rc, $found inputs kept in $artifacts; log $log)"
    # The report's head (what and where) and each kept input, so a CI log
    # alone is enough to reproduce: base64 -d > FILE; kv-fuzz-NAME FILE.
    {
      local first
      first=$(grep -n -m1 -E '^==[0-9]+==ERROR|^SUMMARY:|^ERROR:|runtime error:' "$log" | cut -d: -f1)
      if [ -n "$first" ]; then
        sed -n "${first},$((first + 40))p" "$log"
      else
        tail -30 "$log"
      fi
      for input in $(find "$artifacts" -type f -size -16k | head -3); do
        echo "--- kept input $input (base64):"
        base64 "$input"
      done
    } >"$scratch/$name.report"
  fi
  printf '%-14s %12s %10s %8s  %s\n' "$name" "${execs:-?}" "${rate:-?}" "$size" "$result" \
    >"$scratch/$name.row"
}

running=0
for name in "${targets[@]}"; do
  if [ $running -ge "$jobs" ]; then
    wait -n
    running=$((running - 1))
  fi
  fuzz "$name" &
  running=$((running + 1))
done
wait

status=0
printf '%-14s %12s %10s %8s  %s\n' target executions "exec/s" corpus result
for name in "${targets[@]}"; do
  cat "$scratch/$name.row"
  if [ -f "$scratch/$name.report" ]; then
    status=1
    cat "$scratch/$name.report" >&2
  fi
done
exit $status
