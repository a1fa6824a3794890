//===- ThreadsOption.cpp - The tools' --threads option ----------*- C++ -*-===//

#include "driver/compiler/ThreadsOption.h"

#include "runtime/core/KVParallel.h"

#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

namespace cl = llvm::cl;

cl::opt<int> &
kvir::compiler::registerThreadsOption(cl::OptionCategory &category) {
  auto &registered = cl::getRegisteredOptions();
  auto existing = registered.find("threads");
  if (existing != registered.end())
    existing->second->removeArgument();
  static cl::opt<int> threads(
      "threads",
      cl::desc("threads of the generated CPU code's parallel loops (default "
               "0: KVIR_THREADS if set, else every core); results are "
               "bit-identical for any count"),
      cl::value_desc("n"), cl::init(0), cl::cat(category));
  return threads;
}

bool kvir::compiler::applyThreadsOption(const cl::opt<int> &threads,
                                        llvm::StringRef tool) {
  if (threads < 0 || threads > KVRT_MAX_THREADS) {
    llvm::WithColor::error(llvm::errs(), tool)
        << "--threads " << threads << ": give 1 to " << KVRT_MAX_THREADS
        << ", or 0 for the default\n";
    return false;
  }
  kvrt_set_num_threads(threads);
  return true;
}
