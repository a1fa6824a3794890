#!/usr/bin/env bash
# Sets everything up and runs the main job: installs the packages, builds, and
# runs the standard pipeline (kv-optimize) on the agent-edit example.
set -euo pipefail
cd "$(dirname "$0")/.."

bash tools/install-deps.sh
cmake -G Ninja -S . -B build
cmake --build build --target kv-opt

echo "== kv-opt --kv-optimize examples/agent-edit.mlir"
build/bin/kv-opt --kv-optimize examples/agent-edit.mlir
