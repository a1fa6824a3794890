//===- CacheOption.h - The tools' compile cache options ---------*- C++ -*-===//
//
// `--no-cache` and `--cache-max-mb N` for tools whose command line is
// llvm::cl's (kv-bench): the same options, with the same help and check, as
// the runners' (driver/runner/RunOptions.h), and the same cache
// (CompileCache.h).
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_DRIVER_COMPILER_CACHEOPTION_H
#define KVIR_DRIVER_COMPILER_CACHEOPTION_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/CommandLine.h"

namespace kvir::compiler {

/// Registers `--no-cache` and `--cache-max-mb N` in `category`; call it in
/// main before parsing the command line, once.
void registerCacheOptions(llvm::cl::OptionCategory &category);

/// Installs the compile cache the parsed options ask for. False, with a
/// message on stderr naming `tool`, for a bound out of range; a directory
/// that cannot be used is a warning (the tool compiles everything).
bool applyCacheOptions(llvm::StringRef tool);

} // namespace kvir::compiler

#endif // KVIR_DRIVER_COMPILER_CACHEOPTION_H
