//===- Version.cpp - KVIR's version, for every tool's --version -*- C++ -*-===//

#include "driver/version/Version.h"

// Set by driver/version/CMakeLists.txt at configure time.
#ifndef KVIR_VERSION
#error "KVIR_VERSION is defined by CMake"
#endif
#ifndef KVIR_GIT_DESCRIBE
#define KVIR_GIT_DESCRIBE ""
#endif
#ifndef KVIR_LLVM_VERSION
#define KVIR_LLVM_VERSION "unknown"
#endif

std::string kvir::kvirVersion() {
  std::string version = KVIR_VERSION;
  std::string describe = KVIR_GIT_DESCRIBE;
  if (!describe.empty())
    version += " (git " + describe + " at configure time)";
  return version;
}

const char *kvir::llvmVersion() { return KVIR_LLVM_VERSION; }

std::string kvir::versionText(const char *tool) {
  return std::string(tool) + " (KVIR) " + kvirVersion() +
         "\nbuilt with LLVM/MLIR " + llvmVersion() + "\n";
}
