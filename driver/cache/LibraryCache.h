//===- LibraryCache.h - Compiled code kept as shared libraries -*- C++ -*-===//
//
// kv-run keeps the code it runs, the token-list form's forward or a
// program, as shared libraries in the compile cache's directory
// (CacheDirectory.h), written by kv-aot in a child process, so that the
// process that runs them loads them with dlopen and never loads LLVM or MLIR
// (docs/kv-run.md "Start-up and memory"). An entry is named by its key (the
// caller's: a forward key, a program's text and options) and the identity of
// the code: KVIR's version, the build of the runtime the code calls (this
// process), of the compiler that wrote it (kv-aot's file) and the host CPU.
// Each file is
//
//   library  the shared object, as the linker wrote it
//   trailer  the key, the identity, their sizes and the library's, a
//            checksum of everything before it, magic "KVIRFWD1"
//
// (a loader maps an ELF file by its program headers: bytes after them are
// never read). Files are created whole; one that fails a check is ignored,
// counted as rejected and written over.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_DRIVER_CACHE_LIBRARYCACHE_H
#define KVIR_DRIVER_CACHE_LIBRARYCACHE_H

#include "driver/cache/CacheDirectory.h"

#include <memory>
#include <string>

namespace kvir::cache {

/// The identity of libraries loaded by this process and written by the
/// compiler `compilerPath` (kv-aot): KVIR's version, the builds of this
/// process's executable and of that file (GNU build ids, else their sizes
/// and times), the host CPU's model and features (cpuid).
std::string libraryIdentity(const std::string &compilerPath);

/// The host CPU as the key of generated code sees it: vendor, family,
/// model, stepping and the feature words of cpuid (an x86 host), else the
/// machine's name.
std::string hostCpuIdentity();

class LibraryCache {
public:
  struct Config {
    std::string directory;
    /// The bound on all the directory's entries.
    uint64_t maxBytes = uint64_t(1) << 30;
    std::string identity;
  };

  /// Opens (creates) the directory; null with `error` where it cannot be
  /// used (openCacheDirectory).
  static std::unique_ptr<LibraryCache> open(const Config &config,
                                            std::string &error);

  /// On a hit, true and the entry's file in `path` (checked whole; dlopen
  /// it). False on a miss or a file that fails a check (`why` says which).
  bool load(const std::string &key, std::string &path,
            std::string *why = nullptr);

  /// Writes the entry of `key` from the bytes of `library`, then keeps the
  /// directory's bound. False with `error`; nothing partial is left.
  bool store(const std::string &key, const std::string &library,
             std::string &error);

  /// A hit whose library could not be loaded (dlopen, a missing symbol):
  /// counted as rejected; the caller compiles and stores again.
  void countUnusable();

  /// The file of `key`'s entry.
  std::string entryPath(const std::string &key) const;
  const std::string &directory() const { return config.directory; }
  CacheStats stats() const;

private:
  explicit LibraryCache(Config config) : config(std::move(config)) {}

  Config config;
  CacheCounters counters;
};

} // namespace kvir::cache

#endif // KVIR_DRIVER_CACHE_LIBRARYCACHE_H
