//===- LibraryCache.cpp - Compiled code kept as shared libraries ----------===//

#include "driver/cache/LibraryCache.h"

#include "driver/version/Version.h"
#include "runtime/core/Support.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <sys/stat.h>
#include <sys/utsname.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

using namespace kvir;
using namespace kvir::cache;

namespace {

constexpr char kMagic[8] = {'K', 'V', 'I', 'R', 'F', 'W', 'D', '1'};
/// key size, identity size, library size, checksum, magic. The checksum is
/// FNV-1a: it guards against a damaged file, not an adversary (the directory
/// is private to the user).
constexpr size_t kTrailerFixed = 8 + 8 + 8 + 8 + sizeof(kMagic);
constexpr std::string_view kEntrySuffix = ".kvfwd";

void appendLE(std::string &out, uint64_t value) {
  for (unsigned i = 0; i < 8; ++i)
    out.push_back(char(value >> (8 * i)));
}

uint64_t readLE(const char *data) {
  uint64_t value = 0;
  for (unsigned i = 0; i < 8; ++i)
    value |= uint64_t(uint8_t(data[i])) << (8 * i);
  return value;
}

} // namespace

std::string kvir::cache::hostCpuIdentity() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  char vendor[13] = {};
  __get_cpuid(0, &a, &b, &c, &d);
  unsigned maxLeaf = a;
  std::memcpy(vendor, &b, 4);
  std::memcpy(vendor + 4, &d, 4);
  std::memcpy(vendor + 8, &c, 4);
  char text[160];
  __get_cpuid(1, &a, &b, &c, &d);
  unsigned signature = a, features1c = c, features1d = d;
  unsigned b7 = 0, c7 = 0, d7 = 0, a71 = 0;
  if (maxLeaf >= 7) {
    __cpuid_count(7, 0, a, b7, c7, d7);
    __cpuid_count(7, 1, a71, b, c, d);
  }
  // The state the OS saves (AVX-512 and AMX need it) decides what runs.
  unsigned long long xcr0 = 0;
  if (features1c & (1u << 27)) {
    unsigned lo, hi;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (uint64_t(hi) << 32) | lo;
  }
  std::snprintf(text, sizeof(text),
                "%s sig=%08x f1=%08x,%08x f7=%08x,%08x,%08x,%08x xcr0=%llx",
                vendor, signature, features1c, features1d, b7, c7, d7, a71,
                xcr0);
  return text;
#else
  struct utsname name;
  if (::uname(&name) != 0)
    return "unknown";
  return name.machine;
#endif
}

namespace {

/// The build id of the ELF file `path` (fileBuildId), or, for a file built
/// without one, its size and time of modification: a rebuild changes it.
std::string buildOf(const std::string &path) {
  std::string id = fileBuildId(path);
  if (!id.empty())
    return id;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return "absent";
  return "stat:" + std::to_string(st.st_size) + "." +
         std::to_string(st.st_mtim.tv_sec) + "." +
         std::to_string(st.st_mtim.tv_nsec);
}

} // namespace

std::string kvir::cache::libraryIdentity(const std::string &compilerPath) {
  return "kvir " + kvirVersion() + "; runtime " + buildOf("/proc/self/exe") +
         "; compiler " + buildOf(compilerPath) + "; cpu " + hostCpuIdentity();
}

std::unique_ptr<LibraryCache> LibraryCache::open(const Config &config,
                                                 std::string &error) {
  if (config.maxBytes == 0) {
    error = "the cache's bound must be positive";
    return nullptr;
  }
  if (!openCacheDirectory(config.directory, error))
    return nullptr;
  return std::unique_ptr<LibraryCache>(new LibraryCache(config));
}

std::string LibraryCache::entryPath(const std::string &key) const {
  // The identity is part of the name: builds of different versions keep
  // their entries side by side.
  uint64_t hash = kvrt::fnv1a(key, kvrt::fnv1a(config.identity + '\0'));
  char name[24];
  std::snprintf(name, sizeof(name), "%016llx",
                static_cast<unsigned long long>(hash));
  return config.directory + "/" + name + std::string(kEntrySuffix);
}

bool LibraryCache::load(const std::string &key, std::string &path,
                        std::string *why) {
  path = entryPath(key);
  auto reject = [&](const std::string &reason) {
    ++counters.rejected;
    if (why)
      *why = reason;
    return false;
  };
  std::string data;
  if (int error = readWhole(path, data)) {
    if (error == ENOENT) {
      ++counters.misses;
      if (why)
        *why = "no entry";
      return false;
    }
    return reject(std::string("unreadable: ") + std::strerror(error));
  }
  if (data.size() < kTrailerFixed ||
      std::memcmp(data.data() + data.size() - sizeof(kMagic), kMagic,
                  sizeof(kMagic)) != 0)
    return reject("not an entry (bad magic)");
  const char *fixed = data.data() + data.size() - kTrailerFixed;
  uint64_t keySize = readLE(fixed), identitySize = readLE(fixed + 8),
           librarySize = readLE(fixed + 16), checksum = readLE(fixed + 24);
  uint64_t body = data.size() - kTrailerFixed;
  if (keySize > body || identitySize > body - keySize ||
      librarySize != body - keySize - identitySize)
    return reject("corrupt: its sizes do not match the file's");
  if (kvrt::fnv1a(std::string_view(data.data(), body + 24)) != checksum)
    return reject("corrupt: checksum mismatch");
  if (std::string_view(data.data() + librarySize, keySize) != key)
    return reject("stale: another key");
  if (std::string_view(data.data() + librarySize + keySize, identitySize) !=
      config.identity)
    return reject("stale: another toolchain");
  ++counters.hits;
  touch(path);
  return true;
}

bool LibraryCache::store(const std::string &key, const std::string &library,
                         std::string &error) {
  std::string trailer = key + config.identity;
  appendLE(trailer, key.size());
  appendLE(trailer, config.identity.size());
  appendLE(trailer, library.size());
  uint64_t checksum = kvrt::fnv1a(trailer, kvrt::fnv1a(library));
  appendLE(trailer, checksum);
  trailer.append(kMagic, sizeof(kMagic));
  if (library.size() + trailer.size() > config.maxBytes) {
    ++counters.storeFailures;
    error = "the entry (" + std::to_string(library.size() + trailer.size()) +
            " bytes) is larger than the cache's bound";
    return false;
  }
  if (!writeWhole(config.directory, entryPath(key), {library, trailer},
                  error)) {
    ++counters.storeFailures;
    return false;
  }
  ++counters.stored;
  counters.evicted += evict(config.directory, config.maxBytes);
  return true;
}

void LibraryCache::countUnusable() { counters.countUnusable(); }

CacheStats LibraryCache::stats() const { return counters.snapshot(); }
