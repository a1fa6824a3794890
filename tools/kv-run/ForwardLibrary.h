//===- ForwardLibrary.h - A forward loaded as a shared library --*- C++ -*-===//
//
// How kv-run's token-list form gets its forward without LLVM: from the
// compile cache (driver/cache/ForwardLibraryCache.h), else compiled by
// `kv-aot --forward KEY` in a child process, stored, and loaded with dlopen.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_TOOLS_KV_RUN_FORWARDLIBRARY_H
#define KVIR_TOOLS_KV_RUN_FORWARDLIBRARY_H

#include "driver/cache/ForwardLibraryCache.h"
#include "driver/runner/Runner.h"

#include <string>

namespace kvir::run {

/// The file of the executable `name` beside this one (kv-aot, kv-run-jit).
std::string besideThisExecutable(const std::string &name);

/// The forward of `runner`'s model (its config, weights' formats and page
/// type; quantised products as `quantDot` says) from `cache`, or, on a
/// miss, a corrupt entry or with no cache (null: --no-cache), compiled by
/// `compiler` (kv-aot) in a child process and stored in `cache`. Loaded for
/// the life of the process. False with `error`.
bool loadForwardLibrary(const Runner &runner, const std::string &quantDot,
                        cache::ForwardLibraryCache *cache,
                        const std::string &compiler, Forward &out,
                        std::string &error);

} // namespace kvir::run

#endif // KVIR_TOOLS_KV_RUN_FORWARDLIBRARY_H
