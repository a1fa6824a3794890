# Sourced by the scripts that compare with llama.cpp (bench/peer/
# llama-agreement.sh, test/golden/tokenizer/make-goldens.sh): llama.cpp's
# prebuilt library and the source of the same release, never a dependency of
# KVIR.
#
#   fetch_llama NAME WORK [PEER]
#
# From npm (`npm pack` into WORK): @node-llama-cpp/linux-x64@3.22.1 (libllama,
# libggml and the CPU backends in package/bins/linux-x64) and
# node-llama-cpp@3.22.1 (the llama.cpp source as the git bundle
# package/llama/gitRelease.bundle, cloned to WORK/llama.cpp for its headers).
# With PEER, a folder holding both unpacked instead (PEER/bin/package/bins/
# linux-x64 and PEER/llama.cpp). Sets llama_libs and llama_src; returns 1,
# saying why (NAME: skipped: ...), where npm is not installed and no PEER is
# given.
fetch_llama() {
  local name=$1 work=$2 peer=${3:-}
  if [ -n "$peer" ]; then
    llama_libs=$peer/bin/package/bins/linux-x64
    llama_src=$peer/llama.cpp
    return 0
  fi
  if ! command -v npm >/dev/null; then
    echo "$name: skipped: npm is not installed (it fetches llama.cpp's prebuilt library)"
    return 1
  fi
  (cd "$work" && npm pack --silent @node-llama-cpp/linux-x64@3.22.1 node-llama-cpp@3.22.1 >/dev/null)
  mkdir -p "$work/bin" "$work/src"
  tar xzf "$work"/node-llama-cpp-linux-x64-3.22.1.tgz -C "$work/bin"
  tar xzf "$work"/node-llama-cpp-3.22.1.tgz -C "$work/src"
  git -c advice.detachedHead=false clone -q \
    "$work/src/package/llama/gitRelease.bundle" "$work/llama.cpp"
  llama_libs=$work/bin/package/bins/linux-x64
  llama_src=$work/llama.cpp
}

# Compiles bench/peer/llama-logits.cpp against what fetch_llama found, into
# WORK/llama-logits, and points ggml at its CPU backends.
#
#   build_llama_logits WORK
build_llama_logits() {
  local work=$1 here
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  c++ -std=c++17 -O1 -I"$llama_src/include" -I"$llama_src/ggml/include" \
    "$here/llama-logits.cpp" -o "$work/llama-logits" \
    -L"$llama_libs" -l:libllama.v0.5.0.so -l:libggml.v0.5.0.so \
    -l:libggml-base.so -Wl,-rpath,"$llama_libs"
  export LLAMA_BACKEND_DIR=$llama_libs
}
