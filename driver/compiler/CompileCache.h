//===- CompileCache.h - Compiled code kept on disk between runs -*- C++ -*-===//
//
// JIT-compiling a lowered kv program (LLVM -O3 and code generation) is most
// of a tool's start-up. The compile cache keeps what the JIT produced, the
// object file, in a directory, so that the next process that compiles the
// same program for the same machine loads it instead (DESIGN.md §8: a plan
// is compiled once per program shape and cached, in memory and on disk).
//
// An entry is named by a key: a digest of everything that decides the code
// (compileProgram: the module given to the lowering pipeline, printed with
// its locations, and the pipeline with its options) mixed with the
// toolchain's identity (KVIR's version and build, LLVM's version and build,
// the host CPU and its features: toolchainIdentity()). Each file is
//
//   header   magic "KVIRJIT\0", format, the key, a digest of the identity,
//            the sizes of the two parts, a digest of both parts
//   object   the relocatable object the JIT compiled
//   metadata what the compiler needs besides the code (the sites of the
//            program, printed)
//
// and is only ever created whole: written to a temporary file in the
// directory, flushed to disk, then renamed over its name, so a reader sees
// the old entry, the new one or none, never a part. A file that fails a
// check (size, magic, format, key, identity, digest) is ignored and counted
// as rejected; the caller compiles and stores a fresh entry over it. The
// directory is bounded: after each store the least recently used entries
// (a hit refreshes an entry's time) are removed beyond the bound. It is
// created private (0700) and refused when another user owns it or others
// may write to it: the cache holds code this process runs.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_DRIVER_COMPILER_COMPILECACHE_H
#define KVIR_DRIVER_COMPILER_COMPILECACHE_H

#include "driver/cache/CacheDirectory.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/BLAKE3.h"

#include <array>
#include <cstdint>
#include <memory>
#include <string>

namespace kvir::compiler {

/// The 32-byte digest that names an entry.
struct CacheKey {
  std::array<uint8_t, 32> bytes{};
  /// 64 lowercase hex digits.
  std::string hex() const;
  bool operator==(const CacheKey &other) const { return bytes == other.bytes; }
};

/// Hashes the parts of a key. Each part is labelled and length-prefixed, so
/// that no two different sequences of parts hash alike.
class CacheKeyBuilder {
public:
  CacheKeyBuilder &add(llvm::StringRef label, llvm::StringRef value);
  CacheKey finish() const;

private:
  llvm::BLAKE3 hasher;
};

/// What an entry holds.
struct CacheEntry {
  std::string object;
  std::string metadata;
};

using cache::CacheStats;

/// A directory of compiled objects, shared by every process pointed at it.
/// Thread-safe.
class CompileCache {
public:
  struct Config {
    /// Created (with its parents) when absent.
    std::string directory;
    /// The bound on the entries' total size.
    uint64_t maxBytes = uint64_t(1) << 30;
    /// The toolchain's identity (toolchainIdentity() in the tools; tests
    /// give their own).
    std::string identity;
  };

  /// Opens (creates) the directory of `config`; null with `error` when it
  /// cannot be created or is not safe to load code from.
  static std::unique_ptr<CompileCache> open(const Config &config,
                                            std::string &error);

  /// The entry of `key`: true and `out` on a hit. False on a miss and for a
  /// file that fails a check (`why`, when given, says which).
  bool load(const CacheKey &key, CacheEntry &out, std::string *why = nullptr);

  /// Writes the entry of `key` (replacing any), then removes the least
  /// recently used entries beyond the bound. False with `error` when it
  /// could not be written; nothing partial is left behind.
  bool store(const CacheKey &key, const CacheEntry &entry, std::string &error);

  /// The file of `key`'s entry (for tests and messages).
  std::string entryPath(const CacheKey &key) const;
  const std::string &directory() const { return config.directory; }
  uint64_t maxBytes() const { return config.maxBytes; }
  CacheStats stats() const;

  /// Counts a load whose entry passed the file's checks but could not be
  /// used (its object failed to link): the caller compiles instead.
  void countUnusable();

private:
  explicit CompileCache(Config config);
  /// Removes the least recently used entries beyond the bound, and
  /// temporary files an interrupted writer left (older than an hour).
  void evict();

  Config config;
  /// BLAKE3 of the identity, as the header records it.
  std::array<uint8_t, 32> identityDigest;
  cache::CacheCounters counters;
};

/// The identity of the code this process generates: KVIR's version and the
/// build of its compiler (the GNU build id of the binary it is linked into,
/// else a digest of that file), LLVM's version and the build of
/// libLLVM/libMLIR, the host CPU's name and features.
std::string toolchainIdentity();

/// Where the cache lives by default (CacheDirectory.h).
using cache::defaultCacheDirectory;

/// The cache compileProgram and compileForward use, for the whole process
/// (null: none, the default; the tools install one).
void setCompileCache(std::shared_ptr<CompileCache> cache);
std::shared_ptr<CompileCache> compileCache();

/// What the tools do: opens the cache of defaultCacheDirectory() bounded
/// to `maxBytes`, for toolchainIdentity(), and installs it. False with
/// `error` when there is no directory or it cannot be used (the tool goes
/// on without a cache).
bool installDefaultCompileCache(uint64_t maxBytes, std::string &error);

/// One line of `cache`'s statistics, e.g. "compile cache: 1 hit, 0 misses,
/// 0 rejected, 0 stored, 0 evicted (DIR)".
std::string describeCacheStats(const CompileCache &cache);

} // namespace kvir::compiler

#endif // KVIR_DRIVER_COMPILER_COMPILECACHE_H
