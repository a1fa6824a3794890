#!/usr/bin/env bash
# Runs a command next to a private redis-server: 127.0.0.1, a free port of
# its own, no persistence, a temporary directory. The server is stopped when
# the command ends, fails or is interrupted. The command sees
#   KVIR_REDIS_URL   redis://127.0.0.1:PORT
#   KVIR_REDIS_PORT  PORT
#   KVIR_REDIS_PID   the server's pid (fault tests kill it)
# Exits 77 (ctest's SKIP_RETURN_CODE) when redis-server is not installed.
#
#   bash tools/with-redis.sh build/bin/kv-bench-store
set -u

if ! command -v redis-server >/dev/null 2>&1 ||
  ! command -v redis-cli >/dev/null 2>&1; then
  echo "with-redis: redis-server or redis-cli not found (Debian: apt-get" \
    "install redis-server)" >&2
  exit 77
fi
if [ $# -eq 0 ]; then
  echo "usage: with-redis.sh COMMAND [ARGS...]" >&2
  exit 2
fi

dir=$(mktemp -d "${TMPDIR:-/tmp}/kvir-redis.XXXXXX")
pid=""
stop() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  fi
  rm -rf "$dir"
}
trap stop EXIT
trap 'exit 130' INT TERM

# A random port; one that is taken makes redis-server exit, and another is
# tried.
port=""
for _ in 1 2 3 4 5 6 7 8 9 10; do
  candidate=$((20000 + (RANDOM * 32768 + RANDOM) % 40000))
  redis-server --bind 127.0.0.1 --port "$candidate" --save '' \
    --appendonly no --dir "$dir" --logfile "$dir/redis.log" \
    --enable-debug-command local >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 100); do
    # The server that answers must be ours: on a port that was taken, ours
    # exits and another one may answer.
    if redis-cli -p "$candidate" info server 2>/dev/null | tr -d '\r' |
      grep -qx "process_id:$pid"; then
      port=$candidate
      break 2
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  pid=""
done
if [ -z "$port" ]; then
  echo "with-redis: redis-server did not start; its log:" >&2
  cat "$dir/redis.log" >&2 2>/dev/null
  exit 1
fi

export KVIR_REDIS_URL="redis://127.0.0.1:$port"
export KVIR_REDIS_PORT="$port"
export KVIR_REDIS_PID="$pid"
"$@"
