//===- CacheDirectory.h - The compile cache's directory ---------*- C++ -*-===//
//
// What every writer and reader of the compile cache's directory shares,
// without LLVM: where it is, the checks that make it safe to load code from,
// files created whole, the bound kept by removing the least recently used
// entries, and the line --cache-stats prints. Two kinds of entry live there:
// the JIT's objects (`*.kvjit`, driver/compiler/CompileCache.h) and the
// libraries kv-run loads with dlopen (`*.kvfwd`, LibraryCache.h); one
// bound covers both.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_DRIVER_CACHE_CACHEDIRECTORY_H
#define KVIR_DRIVER_CACHE_CACHEDIRECTORY_H

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvir::cache {

/// Where the cache lives by default: $KVIR_CACHE_DIR, else
/// $XDG_CACHE_HOME/kvir, else $HOME/.cache/kvir ("" when none is set).
std::string defaultCacheDirectory();

/// Creates `directory` (and its parents) private to this user where it is
/// absent; false with `error` where it cannot be, is not a directory, or is
/// owned by another user or writable by others: the cache holds code this
/// process runs.
bool openCacheDirectory(const std::string &directory, std::string &error);

/// Writes the concatenation of `parts` as `path` (inside `directory`) whole
/// or not at all: a temporary file beside it, flushed, renamed over it, the
/// directory flushed. False with `error`; nothing partial is left behind.
bool writeWhole(const std::string &directory, const std::string &path,
                const std::vector<std::string_view> &parts, std::string &error);

/// Reads all of `path` into `out`: 0, or the errno that stopped it.
int readWhole(const std::string &path, std::string &out);

/// Makes `path` the most recently used entry (a failure only makes it look
/// older).
void touch(const std::string &path);

/// Removes the least recently used entries of `directory` (both kinds)
/// until they total at most `maxBytes`, and temporary files an interrupted
/// writer left (older than an hour). The number of entries removed.
int64_t evict(const std::string &directory, uint64_t maxBytes);

/// The GNU build id, as hex, of the loaded object (executable or shared
/// library) that holds `address`, or "" where it has none; `path` gets the
/// object's file ("" for the main program).
std::string buildIdAt(const void *address, std::string *path = nullptr);

/// The GNU build id, as hex, of the ELF file `path`; "" where it cannot be
/// read or has none.
std::string fileBuildId(const std::string &path);

/// A message for the current errno: `what`: strerror.
std::string errnoText(const std::string &what);

/// What a cache did so far.
struct CacheStats {
  /// Loads that found a valid entry; that found none; that found a file
  /// failing a check (counted apart from the misses).
  int64_t hits = 0, misses = 0, rejected = 0;
  /// Entries written; writes that failed (the run goes on without them);
  /// entries removed to keep the bound.
  int64_t stored = 0, storeFailures = 0, evicted = 0;
};

/// What a cache counts, as it goes (thread-safe).
struct CacheCounters {
  std::atomic<int64_t> hits{0}, misses{0}, rejected{0}, stored{0},
      storeFailures{0}, evicted{0};
  CacheStats snapshot() const;
  /// A hit whose entry could not be used after all: a rejection.
  void countUnusable() {
    --hits;
    ++rejected;
  }
};

/// The line --cache-stats prints: "compile cache: 1 hit, 0 misses, 0
/// rejected, 0 stored, 0 evicted (DIR)".
std::string describeCacheStats(const CacheStats &stats,
                               const std::string &directory);

} // namespace kvir::cache

#endif // KVIR_DRIVER_CACHE_CACHEDIRECTORY_H
