//===- CompileCacheEnvironment.cpp - Tests share compiled code -*- C++ -*-===//
//
// Linked into the unit test binaries that compile forwards and programs in
// process: where $KVIR_CACHE_DIR is set (ctest sets it to the build tree's
// test/compile-cache, as for lit and the tools' tests), the process installs
// the compile cache the tools install, so that ctest's one process per test
// compiles each forward once per build rather than once per test. Run by
// hand without it, a test binary compiles everything afresh.
//
//===----------------------------------------------------------------------===//

#include "driver/compiler/CompileCache.h"

#include "gtest/gtest.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

class CompileCacheEnvironment : public testing::Environment {
public:
  void SetUp() override {
    const char *dir = std::getenv("KVIR_CACHE_DIR");
    if (!dir || !*dir)
      return;
    std::string error;
    if (!kvir::compiler::installDefaultCompileCache(uint64_t(2) << 30, error))
      std::fprintf(stderr, "note: no compile cache for the tests: %s\n",
                   error.c_str());
  }
};

const testing::Environment *const environment =
    testing::AddGlobalTestEnvironment(new CompileCacheEnvironment);

} // namespace
