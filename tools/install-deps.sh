#!/usr/bin/env bash
# Installs the Debian 12 packages KVIR builds with. Idempotent: packages already
# present are left alone and nothing is fetched when all are there.
set -euo pipefail

packages=(
  build-essential cmake ninja-build python3 ccache git
  llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools clang-22 lld-22
  libgtest-dev libgmock-dev libbenchmark-dev
  libclang-rt-22-dev redis-server redis-tools libhiredis-dev libopenblas-dev
  libcpp-httplib-dev nlohmann-json3-dev pkg-config curl jq
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: run as root or install sudo" >&2; exit 1; }
  sudo=sudo
fi
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${missing[@]}"
