//===- CachedLibrary.h - Compiled code from the cache or kv-aot -*- C++ -*-===//
//
// How kv-run gets compiled code without LLVM: a shared library from the
// compile cache (driver/cache/LibraryCache.h), else compiled by kv-aot
// in a child process (`kv-aot --forward KEY` for the token-list form's
// forward, `kv-aot PROGRAM` for a program), stored, and loaded with dlopen.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_TOOLS_KV_RUN_CACHEDLIBRARY_H
#define KVIR_TOOLS_KV_RUN_CACHEDLIBRARY_H

#include "driver/cache/LibraryCache.h"
#include "driver/runner/Runner.h"

#include <functional>
#include <string>
#include <vector>

namespace kvir::run {

/// Opens a library file for its user; false with `why`.
using LibraryOpener =
    std::function<bool(const std::string &path, std::string &why)>;

/// The library of `entryKey` from `cache`, opened by `open`; on a miss, a
/// corrupt entry, one `open` refuses or with no cache (null), the library
/// that `compile` (kv-aot and its arguments; `-o DIR --name code` added)
/// writes in a child process, stored in `cache` and opened. False with
/// `error`: the compiler's output where it failed.
bool loadCachedLibrary(const std::vector<std::string> &compile,
                       const std::string &entryKey, cache::LibraryCache *cache,
                       const LibraryOpener &open, std::string &error);

/// The file of the executable `name` beside this one (kv-aot, kv-run-jit).
std::string besideThisExecutable(const std::string &name);

/// The forward of `runner`'s model (its config, weights' formats and page
/// type; quantised products as `quantDot` says) from `cache`, or, on a
/// miss, a corrupt entry or with no cache (null: --no-cache), compiled by
/// `compiler` (kv-aot) in a child process and stored in `cache`. Loaded for
/// the life of the process. False with `error`.
bool loadForwardLibrary(const Runner &runner, const std::string &quantDot,
                        cache::LibraryCache *cache, const std::string &compiler,
                        Forward &out, std::string &error);

} // namespace kvir::run

#endif // KVIR_TOOLS_KV_RUN_CACHEDLIBRARY_H
