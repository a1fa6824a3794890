#!/usr/bin/env bash
# Sets everything up and runs the main job: installs the packages, builds, and
# runs the agent-edit example through kv-run: the program is planned by
# kv-optimize, executed with generated CPU kernels on the built-in synthetic
# model (pass --model FILE after the script's name for a real checkpoint), and
# compared with a full prefill of the same final context.
set -euo pipefail
cd "$(dirname "$0")/.."

bash tools/install-deps.sh
cmake -G Ninja -S . -B build
cmake --build build --target kv-opt kv-run

echo "== kv-opt --kv-optimize=emit-plan examples/agent-edit.mlir (the plan)"
build/bin/kv-opt --kv-optimize=emit-plan examples/agent-edit.mlir -o /dev/null
echo
echo "== kv-run examples/agent-edit.mlir (the plan, run and compared)"
build/bin/kv-run examples/agent-edit.mlir --backend cpu --synthesize-inputs \
  --compare-full-prefill "$@"
