//===- ThreadsOption.cpp - The tools' --threads option ----------*- C++ -*-===//

#include "driver/compiler/ThreadsOption.h"

#include "driver/runner/RunOptions.h"

#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

namespace cl = llvm::cl;

cl::opt<int> &
kvir::compiler::registerThreadsOption(cl::OptionCategory &category) {
  auto &registered = cl::getRegisteredOptions();
  auto existing = registered.find("threads");
  if (existing != registered.end())
    existing->second->removeArgument();
  static cl::opt<int> threads("threads", cl::desc(run::kThreadsHelp),
                              cl::value_desc("n"), cl::init(0),
                              cl::cat(category));
  return threads;
}

bool kvir::compiler::applyThreadsOption(const cl::opt<int> &threads,
                                        llvm::StringRef tool) {
  std::string error;
  if (run::applyThreads(threads, error))
    return true;
  llvm::WithColor::error(llvm::errs(), tool) << error << "\n";
  return false;
}
