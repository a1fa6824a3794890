//===- VersionOption.h - --version for llvm::cl tools -----------*- C++ -*-===//
//
// `--version` of the tools whose command line is llvm::cl's (kv-opt, kv-aot,
// the benchmarks): KVIR's version and the LLVM/MLIR it was built with
// (driver/version/Version.h), instead of LLVM's own text.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_DRIVER_COMPILER_VERSIONOPTION_H
#define KVIR_DRIVER_COMPILER_VERSIONOPTION_H

#include "driver/version/Version.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

namespace kvir::compiler {

/// Makes `--version` print versionText(tool); call it in main before the
/// command line is parsed. `tool` must outlive the parse (a literal).
inline void setVersionPrinter(const char *tool) {
  llvm::cl::SetVersionPrinter(
      [tool](llvm::raw_ostream &os) { os << versionText(tool); });
}

/// Parses the command line of an llvm::cl tool whose own options are in
/// `category`: `--version` as setVersionPrinter says, `--help` listing
/// `category` alone (LLVM's options stay hidden), `overview` above it.
inline void parseToolOptions(int argc, char **argv, const char *tool,
                             llvm::cl::OptionCategory &category,
                             const char *overview) {
  setVersionPrinter(tool);
  llvm::cl::HideUnrelatedOptions(category);
  llvm::cl::ParseCommandLineOptions(argc, argv, overview);
}

} // namespace kvir::compiler

#endif // KVIR_DRIVER_COMPILER_VERSIONOPTION_H
