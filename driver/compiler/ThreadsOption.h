//===- ThreadsOption.h - The tools' --threads option ------------*- C++ -*-===//
//
// `--threads N` for tools whose command line is llvm::cl's (kv-bench): how
// many threads the generated CPU code's parallel loops use
// (runtime/core/KVParallel.h). Its help and its check are the runners'
// (driver/runner/RunOptions.h), so every tool takes the same option.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_DRIVER_COMPILER_THREADSOPTION_H
#define KVIR_DRIVER_COMPILER_THREADSOPTION_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/CommandLine.h"

namespace kvir::compiler {

/// Registers `--threads N` in `category` and returns it; call it in main
/// before parsing the command line, once. libLLVM registers an option of
/// the same name with no description (a process-wide one that the tools
/// never read); it is unregistered first, since two options of one name
/// abort the program.
llvm::cl::opt<int> &registerThreadsOption(llvm::cl::OptionCategory &category);

/// Sets the runtime's thread count from the parsed option; false, with a
/// message on stderr naming `tool` and the value, where it is out of range.
bool applyThreadsOption(const llvm::cl::opt<int> &threads,
                        llvm::StringRef tool);

} // namespace kvir::compiler

#endif // KVIR_DRIVER_COMPILER_THREADSOPTION_H
