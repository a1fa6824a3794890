#!/usr/bin/env bash
# KVIR and llama.cpp side by side on the same GGUF files, same threads, one
# run (issue 20, item 7): prefill of a prompt, then greedy decoding, and the
# peak resident memory of each process. Not a test dependency: llama.cpp is
# the peer, fetched for this benchmark only.
#
#   bench/peer/side-by-side.sh [--peer DIR] [--build DIR] [--shape SPEC]
#       [--prompt N] [--decode N] [--threads "1 2"] [--types "q4_k_m q8_0 f16"]
#       [--files DIR] [--kvir-args "ARGS"] [--rounds N]
#
# llama.cpp comes from npm as prebuilt binaries (fetch-llama.sh):
# @node-llama-cpp/linux-x64@3.22.1 (libllama, libggml and the CPU backends)
# and node-llama-cpp@3.22.1 (the llama.cpp source of the same release, for
# llama.h and ggml-backend.h). --peer DIR uses a folder holding both unpacked
# instead (DIR/bin/package/bins/linux-x64 and DIR/llama.cpp). Without npm
# (and without --peer) the script says it skipped and exits 0.
#
# --shape is kv-convert's synthetic spec (random weights; default
# TinyLlama's: dim 2048, hidden 5632, 22 layers, 32 heads, 4 KV heads,
# vocabulary 32000); each --types entry is a file kv-convert writes from it
# (its --type). The prompt is --prompt seeded random ids (default 512), the
# same for both. --files DIR keeps the converted files in DIR and reuses
# them on the next run with the same shape (converting a TinyLlama-shaped
# model takes a minute or more on 2 cores; without it they go to a temporary
# folder).
# --decode tokens (default 128) are generated greedily from
# it. KVIR: kv-run --tokens-file PROMPT --greedy N --threads T --json (its
# own timers: the prefill, then the decode steps); llama.cpp: llama-speed.cpp
# (llama_decode of the prompt in one batch, then one token per step, its
# default context: f16 K/V). Peak RSS is /usr/bin/time's, of the whole
# process (KVIR's: kv-run, which loads its forward from the compile cache; on
# a first run the larger of it and the kv-aot child that compiles the
# forward, docs/kv-run.md). --kvir-args adds options to
# each kv-run (e.g. --no-mmap). --rounds N (default 1) runs each row's two
# engines N times, alternated (KVIR, llama.cpp, KVIR, ...), and prints the
# medians of their times (peak RSS: the largest): on a machine whose
# bandwidth moves within minutes (below), one run of each can catch the two
# in different states, and alternated rounds share them. Prints a markdown
# table.
#
# The decode column "GB/s" is what a KVIR decode step reads (kv-run's
# decode_bytes_per_token: the weights, one embedding row, the K/V its token
# attends) over its time, and its share of the machine's read bandwidth on
# as many threads (kv-bench-kernels' BM_ReadBandwidth: a 256 MiB buffer on
# huge pages, best of 5; issue 20's target is 0.8), measured right before
# and right after the row's runs, the share taken against the larger, both
# printed beside it (before/after): on a machine shared with other work the
# bandwidth moves within minutes (31-61 GB/s on two threads in one
# afternoon), so a yardstick taken once for the whole table misstates the
# later rows, one taken in a disturbed moment understates the memory (a
# two-thread F16 step once read 48 GB/s against 37 measured just before
# it), and two far apart say the state moved during the row's runs, whose
# ratio then says which engine caught which state more than which is
# faster. The header line gives the figures taken
# before the table, and what the Q8_0 decode patterns written by hand read
# (kv-bench-kernels' BM_Q8TileModel over the file's rows, BM_Q8Rows16Model
# over the rows repacked for decode, which kv-run's Q8_0 steps read by
# default: the share a decode step can reach).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
peer=
build=$root/build
shape=dim=2048,hidden=5632,layers=22,heads=32,kv_heads=4,vocab=32000
prompt=512
decode=128
threads="1 2"
types="q4_k_m q8_0 f16"
files=
kvirArgs=
rounds=1
while [ $# -gt 0 ]; do
  case "$1" in
  --peer) peer=$(cd "$2" && pwd); shift 2 ;;
  --build) build=$(cd "$2" && pwd); shift 2 ;;
  --shape) shape=$2; shift 2 ;;
  --prompt) prompt=$2; shift 2 ;;
  --decode) decode=$2; shift 2 ;;
  --threads) threads=$2; shift 2 ;;
  --types) types=$2; shift 2 ;;
  --files) mkdir -p "$2" && files=$(cd "$2" && pwd); shift 2 ;;
  --kvir-args) kvirArgs=$2; shift 2 ;;
  --rounds) rounds=$2; shift 2 ;;
  *) echo "side-by-side: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
case "$rounds" in
'' | *[!0-9]* | 0) echo "side-by-side: --rounds takes a positive count, not '$rounds'" >&2; exit 2 ;;
esac
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
files=${files:-$work}

. "$here/fetch-llama.sh"
if ! fetch_llama side-by-side "$work" "$peer"; then
  exit 0
fi
build_llama_tool "$here/llama-speed.cpp" "$work/llama-speed"

vocab=$(echo "$shape" | sed -n 's/.*vocab=\([0-9]*\).*/\1/p')
# llama.cpp loads no file without a vocabulary: a llama2.c tokenizer of
# `vocab` pieces (<unk>, BOS, EOS, the 256 byte pieces, then " w0", " w1",
# ...), embedded by kv-convert. Neither side tokenizes: the ids go verbatim.
python3 - "$vocab" "$work/vocab.bin" <<'PY'
import struct, sys
n, path = int(sys.argv[1]), sys.argv[2]
pieces = [b"<unk>", b"\n<s>\n", b"\n</s>\n"] + [b"<0x%02X>" % i for i in range(256)]
pieces += [b" w%d" % i for i in range(n - len(pieces))]
with open(path, "wb") as f:
    f.write(struct.pack("<i", max(len(p) for p in pieces)))
    for k, p in enumerate(pieces):
        f.write(struct.pack("<fi", -float(k), len(p)) + p)
PY
python3 -c "import random, sys; random.seed(7); print(' '.join(str(random.randrange(3, int(sys.argv[2]))) for _ in range(int(sys.argv[1]))))" \
  "$prompt" "$vocab" >"$work/prompt.txt"

# The peak RSS in MiB of a command, run with its output to FILE (its log to
# FILE.log).
peak() { # FILE CMD...
  local out=$1
  shift
  /usr/bin/time -f "%M" -o "$work/rss" "$@" >"$out" 2>"$out.log"
  echo $(($(cat "$work/rss") / 1024))
}

# A kv-bench-kernels benchmark's bytes a second on T threads now, in GB/s
# (best of 5; "n/a" where it was skipped, as the tile model is without
# AVX-512 VNNI).
bestGBs() { # BENCHMARK T
  "$build/bin/kv-bench-kernels" \
    --benchmark_filter="$1/threads:$2/" \
    --benchmark_repetitions=5 --benchmark_format=json 2>/dev/null |
    python3 -c "
import json, sys
rates = [b['bytes_per_second'] for b in json.load(sys.stdin)['benchmarks'] if b.get('run_type') == 'iteration' and 'bytes_per_second' in b]
print('%.2f' % (max(rates) * 1e-9) if rates else 'n/a')"
}
# The read bandwidth of T threads now: the decode rows' yardstick.
readBandwidth() { # T
  bestGBs BM_ReadBandwidth "$1"
}
# Beside it, once before the table, what the Q8_0 decode patterns written
# by hand read (BM_Q8TileModel, BM_Q8Rows16Model; docs/cpu-backend.md, "What
# the Q8_0 pattern reaches", "A layout for decode"): how much of the plain
# read a decode step can take here.
declare -A readGBs tileGBs rowsGBs
for t in $threads; do
  readGBs[$t]=$(readBandwidth "$t")
  tileGBs[$t]=$(bestGBs BM_Q8TileModel "$t")
  rowsGBs[$t]=$(bestGBs BM_Q8Rows16Model "$t")
done

echo "shape: $shape; prompt $prompt tokens, decode $decode tokens; $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "read bandwidth (GB/s): $(for t in $threads; do printf '%s thread(s) %s; ' "$t" "${readGBs[$t]}"; done)the Q8_0 decode pattern by hand, file rows: $(for t in $threads; do printf '%s thread(s) %s; ' "$t" "${tileGBs[$t]}"; done)repacked rows: $(for t in $threads; do printf '%s thread(s) %s; ' "$t" "${rowsGBs[$t]}"; done)kv-run options: ${kvirArgs:-none}$([ "$rounds" -gt 1 ] && echo "; $rounds alternated rounds a row, medians")"
echo
echo "| file | MiB | threads | prefill ms KVIR / llama.cpp | ratio | decode ms/token KVIR / llama.cpp | ratio | KVIR decode GB/s (share of the read bandwidth, the larger of those measured before / after the row: GB/s) | weights on 2 MiB pages | peak RSS MiB KVIR / llama.cpp | greedy ids agree |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for type in $types; do
  # A kept file is named by the shape and its type: a reused one is the
  # same file kv-convert would write again (the synthetic model is seeded).
  file=$files/$(echo "$shape" | tr ',=' '-_').$type.gguf
  if [ ! -s "$file" ]; then
    "$build/bin/kv-convert" "synthetic:$shape" "$file.tmp" --to gguf --type "$type" \
      --tokenizer "$work/vocab.bin" >/dev/null
    mv "$file.tmp" "$file"
  fi
  mib=$(($(stat -L -c %s "$file") / 1048576))
  for t in $threads; do
    readBefore=$(readBandwidth "$t")
    kvRss=0 llRss=0
    for r in $(seq "$rounds"); do
      rss=$(peak "$work/kvir.$r.json" "$build/bin/kv-run" --model "$file" \
        --tokens-file "$work/prompt.txt" --greedy "$decode" --threads "$t" \
        --no-tokenizer --json $kvirArgs)
      kvRss=$((rss > kvRss ? rss : kvRss))
      rss=$(peak "$work/llama.$r.txt" "$work/llama-speed" "$file" \
        "$work/prompt.txt" "$decode" "$t")
      llRss=$((rss > llRss ? rss : llRss))
    done
    readAfter=$(readBandwidth "$t")
    # The medians of the rounds (one round: its figures), and the first
    # round's greedy ids against llama.cpp's.
    read -r kvPrefill kvDecode kvRead kvHuge llPrefill llDecode agree < <(python3 - "$work" "$rounds" "$readBefore" "$readAfter" <<'PY'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
read = max(float(sys.argv[3]), float(sys.argv[4]))
kv = [json.load(open(f"{work}/kvir.{r}.json")) for r in range(1, rounds + 1)]
ll = []
for r in range(1, rounds + 1):
    words = open(f"{work}/llama.{r}.txt").read().split()
    ll.append({k: float(words[words.index(k) + 1]) for k in ("prefill_ms", "decode_ms_per_token")})
med = lambda rows, key: statistics.median(row.get(key, 0) for row in rows)
gbs = med(kv, "decode_gb_per_s")
huge = 100 * kv[0]["weight_huge_page_bytes"] / kv[0]["weight_bytes"]
a = kv[0]["greedy"]
b = [int(x) for x in open(f"{work}/llama.1.txt").read().split("greedy")[1].split()]
n = 0
while n < min(len(a), len(b)) and a[n] == b[n]:
    n += 1
print("%.1f %.2f %.2f(%.2f:%s/%s) %.0f%% %s %s %d/%d" % (
    med(kv, "prefill_ms"), med(kv, "decode_ms_per_token"), gbs, gbs / read,
    sys.argv[3], sys.argv[4], huge, "%.3f" % med(ll, "prefill_ms"),
    "%.3f" % med(ll, "decode_ms_per_token"), n, len(a)))
PY
    )
    kvRead=$(echo "$kvRead" | sed 's/(/ (/; s/:/: /')
    ratio() { python3 -c "import sys; print('%.2fx' % (float(sys.argv[2]) / float(sys.argv[1])))" "$1" "$2"; }
    echo "| $type | $mib | $t | $kvPrefill / $llPrefill | $(ratio "$kvPrefill" "$llPrefill") | $kvDecode / $llDecode | $(ratio "$kvDecode" "$llDecode") | $kvRead | $kvHuge | $kvRss / $llRss | $agree |"
  done
done
echo
echo "ratio: llama.cpp's time over KVIR's (above 1.00x: KVIR is faster)"
