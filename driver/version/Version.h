//===- Version.h - KVIR's version, for every tool's --version ---*- C++ -*-===//
//
// What `--version` prints in every tool: KVIR's version (CMake's
// PROJECT_VERSION, and `git describe` of the source tree where git was found
// when the build was configured) and the LLVM/MLIR release the build was
// configured with. Plain C++: kv-aot-run and kv-convert link no LLVM.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_DRIVER_VERSION_VERSION_H
#define KVIR_DRIVER_VERSION_VERSION_H

#include <string>

namespace kvir {

/// KVIR's version: "0.1", then " (git DESCRIBE at configure time)" where git
/// described the tree when the build was configured.
std::string kvirVersion();

/// The LLVM/MLIR release the build was configured with ("22.1.8").
const char *llvmVersion();

/// The text of `tool --version`, two lines ending in a newline:
///   kv-run (KVIR) 0.1 (git d9d5b67 at configure time)
///   built with LLVM/MLIR 22.1.8
std::string versionText(const char *tool);

} // namespace kvir

#endif // KVIR_DRIVER_VERSION_VERSION_H
