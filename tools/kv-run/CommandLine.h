//===- CommandLine.h - kv-run's command line --------------------*- C++ -*-===//
//
// The options of kv-run, read the same way by its two executables: kv-run,
// which runs code loaded as shared libraries and never loads LLVM, and
// kv-run-jit, which kv-run hands the other runs to (the CUDA backend,
// --attribute, a program that needs the compiler's diagnostics) and which
// compiles just in time. Plain C++.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_TOOLS_KV_RUN_COMMANDLINE_H
#define KVIR_TOOLS_KV_RUN_COMMANDLINE_H

#include "driver/runner/RunOptions.h"

#include <string>

namespace kvir::run {

/// kv-run's command line: the runners' options and its own.
struct KvRunOptions {
  RunOptions run;
  CacheOptions cache;
  std::string program;
  std::string tokens, tokensFile;
  bool tokensGiven = false, tokensFileGiven = false;
  bool attribute = false;
  bool printTokens = false;
  bool retarget = false;
  /// `--quant-dot`: kv-lower-to-cpu's quant-dot.
  std::string quantDot = "auto";
};

/// What parseKvRunCommandLine found: a run to do, or an exit status (help
/// and version printed, or an error reported).
struct ParsedCommandLine {
  bool run = false;
  int status = 0;
};

/// Reads argv into `options` and checks what can be checked before
/// anything loads (the thread count applied); prints --help and --version.
ParsedCommandLine parseKvRunCommandLine(int argc, char **argv,
                                        KvRunOptions &options);

/// Whether kv-run may run it itself (on CPU code or the reference backend)
/// rather than hand it to kv-run-jit at once (the CUDA backend).
bool runsWithoutCompiler(const KvRunOptions &options);

/// Prints `message` as kv-run's error, warning or note on stderr.
void printError(const std::string &message);
void printWarning(const std::string &message);
void printNote(const std::string &message);

} // namespace kvir::run

#endif // KVIR_TOOLS_KV_RUN_COMMANDLINE_H
