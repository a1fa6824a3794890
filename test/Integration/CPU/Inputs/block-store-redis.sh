#!/usr/bin/env bash
# The driver of block-store-redis.test, run by tools/with-redis.sh next to a
# private redis-server ($KVIR_REDIS_URL, $KVIR_REDIS_PORT, $KVIR_REDIS_PID).
# Prints each step's report after a `== step` line for FileCheck; exits
# non-zero as soon as a step does not do what it must.
#
#   block-store-redis.sh PROGRAM WORKDIR
set -u
program=$1
work=$2
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1

seq 1 40 | tr '\n' ' ' >system.txt
seq 100 163 | tr '\n' ' ' >skill.txt
seq 200 211 | tr '\n' ' ' >question.txt

cli() { redis-cli -p "$KVIR_REDIS_PORT" "$@"; }
run() {
  kv-run "$program" --input system=system.txt --input skill=skill.txt \
    --input question=question.txt --kv-store "$KVIR_REDIS_URL" "$@"
}
# The key of the block a report names.
keyOf() { grep -o '[^ ]*blk:v1:[0-9a-f]\{64\}' "$1" | head -1; }
die() {
  echo "block-store-redis: $*" >&2
  exit 1
}
# A step that failed: its report, then why.
failed() {
  cat "$1" >&2
  die "$2"
}
# The logits of `$1` equal those of the process that prefilled the block.
same() {
  kv-aot-run compare first.f32 "$1" --tolerance 1e-6 || die "$1 differs"
}

echo "== first process: prefills the block and stores it"
run --dump-logits first.f32 >first.txt 2>&1 || failed first.txt "first run failed"
cat first.txt
key=$(keyOf first.txt)
[ "$(cli exists "$key")" = 1 ] || die "$key is not in the store"
echo "stored key: $key"

echo "== second process: fetches the block, no prefill of it"
run --dump-logits second.f32 >second.txt 2>&1 || failed second.txt "second run failed"
cat second.txt
same second.f32

echo "== ahead-of-time runner: fetches the block the JIT runner stored"
kv-aot "$program" --target cpu -o aot >aot.txt 2>&1 || failed aot.txt "kv-aot failed"
kv-aot-run aot/lib*.so --input system=system.txt --input skill=skill.txt \
  --input question=question.txt --kv-store "$KVIR_REDIS_URL" \
  --dump-logits aot.f32 >aot-run.txt 2>&1 || failed aot-run.txt "kv-aot-run failed"
cat aot-run.txt
same aot.f32

echo "== corrupt: three bytes of the payload overwritten by hand"
cli setrange "$key" 4000 XYZ >/dev/null
echo "-- policy fail"
if run --kv-store-policy fail >corrupt-fail.txt 2>&1; then
  die "a corrupt blob with policy fail ran"
fi
cat corrupt-fail.txt
echo "-- policy fallback: prefilled, and the good blob stored again"
run --dump-logits corrupt.f32 >corrupt.txt 2>&1 || failed corrupt.txt "fallback failed"
cat corrupt.txt
same corrupt.f32
run >repaired.txt 2>&1 || failed repaired.txt "run after the repair failed"
cat repaired.txt

echo "== truncated: the blob cut to 1000 bytes"
cli eval "return redis.call('SET', KEYS[1], string.sub(redis.call('GET', KEYS[1]), 1, 1000))" 1 "$key" >/dev/null
run --dump-logits truncated.f32 >truncated.txt 2>&1 || failed truncated.txt "fallback failed"
cat truncated.txt
same truncated.f32

echo "== another model: a miss under its own key"
cli del "$key" >/dev/null
run --dump-logits first.f32 >/dev/null 2>&1 || die "restore failed"
run --model-seed 7 --dump-logits other-first.f32 >other.txt 2>&1 ||
  failed other.txt "other model failed"
cat other.txt
other=$(keyOf other.txt)
[ "$other" != "$key" ] || die "two models share the key $key"
echo "== another model: its key holding the first model's blob"
cli copy "$key" "$other" replace >/dev/null
run --model-seed 7 --dump-logits other.f32 >swapped.txt 2>&1 ||
  failed swapped.txt "fallback failed"
cat swapped.txt
kv-aot-run compare other-first.f32 other.f32 --tolerance 1e-6 ||
  die "another model's blob changed the logits"

echo "== prefix and ttl"
run --kv-store-prefix "team-a:" --kv-store-ttl 100 >prefix.txt 2>&1 ||
  failed prefix.txt "prefix run failed"
cat prefix.txt
pkey=$(keyOf prefix.txt)
echo "prefixed key: $pkey ttl $(cli ttl "$pkey")"
ttl=$(cli ttl "$pkey")
[ "$ttl" -gt 0 ] && [ "$ttl" -le 100 ] || die "ttl $ttl of $pkey"
[ "$(cli ttl "$key")" = -1 ] || die "$key has a ttl without --kv-store-ttl"
run --kv-store-prefix "team-b:" --kv-store-ttl 1 >expire.txt 2>&1 ||
  failed expire.txt "ttl run failed"
sleep 2.2
run --kv-store-prefix "team-b:" >expired.txt 2>&1 || failed expired.txt "expired run failed"
cat expired.txt

echo "== timeout: the server busy, a timeout of 300 ms"
# DEBUG SLEEP keeps the server from answering for 20 s (it then meets the
# kill below); kv-run runs once a ping has gone unanswered.
cli debug sleep 20 >/dev/null 2>&1 &
sleeper=$!
for _ in $(seq 100); do
  timeout 0.2 redis-cli -p "$KVIR_REDIS_PORT" ping >/dev/null 2>&1 || break
  sleep 0.05
done
run --kv-store-timeout-ms 300 --dump-logits slow.f32 >slow.txt 2>&1 ||
  failed slow.txt "fallback failed"
cat slow.txt
same slow.f32

echo "== server killed"
kill -9 "$KVIR_REDIS_PID"
wait "$sleeper" 2>/dev/null
while kill -0 "$KVIR_REDIS_PID" 2>/dev/null; do sleep 0.05; done
run --dump-logits down.f32 >down.txt 2>&1 || failed down.txt "fallback failed"
cat down.txt
same down.f32
echo "-- policy fail"
if run --kv-store-policy fail >down-fail.txt 2>&1; then
  die "an unreachable store with policy fail ran"
fi
cat down-fail.txt
echo "== done"
