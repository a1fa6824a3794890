//===- CacheOption.cpp - The tools' compile cache options -------*- C++ -*-===//

#include "driver/compiler/CacheOption.h"

#include "driver/compiler/CompileCache.h"
#include "driver/runner/RunOptions.h"

#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

namespace cl = llvm::cl;
using namespace kvir;

namespace {

cl::opt<bool> *noCache = nullptr;
cl::opt<int64_t> *maxMb = nullptr;

} // namespace

void kvir::compiler::registerCacheOptions(cl::OptionCategory &category) {
  static cl::opt<bool> noCacheOption("no-cache", cl::desc(run::kNoCacheHelp),
                                     cl::init(false), cl::cat(category));
  static cl::opt<int64_t> maxMbOption(
      "cache-max-mb", cl::desc(run::kCacheMaxMbHelp), cl::value_desc("n"),
      cl::init(run::CacheOptions().maxMb), cl::cat(category));
  noCache = &noCacheOption;
  maxMb = &maxMbOption;
}

bool kvir::compiler::applyCacheOptions(llvm::StringRef tool) {
  run::CacheOptions options;
  options.disabled = noCache && *noCache;
  if (maxMb)
    options.maxMb = *maxMb;
  std::string error;
  if (!run::checkCacheOptions(options, error)) {
    llvm::WithColor::error(llvm::errs(), tool) << error << "\n";
    return false;
  }
  if (!options.disabled &&
      !installDefaultCompileCache(uint64_t(options.maxMb) << 20, error))
    llvm::WithColor::warning(llvm::errs(), tool)
        << "compile cache off: " << error << "\n";
  return true;
}
