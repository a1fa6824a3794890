//===- CompileCache.cpp - Compiled code kept on disk between runs -*- C++ -*-=//

#include "driver/compiler/CompileCache.h"

#include "driver/version/Version.h"

#include "mlir/Target/LLVMIR/Export.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/xxhash.h"
#include "llvm/TargetParser/Host.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <random>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace kvir;
using namespace kvir::compiler;

namespace {

constexpr char kMagic[8] = {'K', 'V', 'I', 'R', 'J', 'I', 'T', '\0'};
/// Bumped whenever the layout of an entry changes.
constexpr uint32_t kFormat = 1;
/// magic, format, key, identity digest, two sizes, payload digest.
constexpr size_t kHeaderSize = 8 + 4 + 32 + 32 + 8 + 8 + 32;
constexpr llvm::StringLiteral kEntrySuffix = ".kvjit";
constexpr llvm::StringLiteral kTempSuffix = ".tmp";
/// A temporary file older than this was left by a writer that died.
constexpr int64_t kStaleTempSeconds = 3600;

using Digest = std::array<uint8_t, 32>;

Digest blake3(llvm::StringRef a, llvm::StringRef b = {}) {
  llvm::BLAKE3 hasher;
  hasher.update(a);
  hasher.update(b);
  return hasher.final();
}

void appendLE(std::string &out, uint64_t value, unsigned bytes) {
  for (unsigned i = 0; i < bytes; ++i)
    out.push_back(char(value >> (8 * i)));
}

uint64_t readLE(const char *data, unsigned bytes) {
  uint64_t value = 0;
  for (unsigned i = 0; i < bytes; ++i)
    value |= uint64_t(uint8_t(data[i])) << (8 * i);
  return value;
}

llvm::StringRef bytesOf(const Digest &digest) {
  return {reinterpret_cast<const char *>(digest.data()), digest.size()};
}

std::string errnoText(const std::string &what) {
  return what + ": " + std::strerror(errno);
}

/// Writes all of `data` to `fd`.
bool writeAll(int fd, llvm::StringRef data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    data = data.drop_front(size_t(n));
  }
  return true;
}

/// A name no other writer uses at the same time: the process, a counter and
/// random bits.
std::string uniqueSuffix() {
  static std::atomic<uint64_t> counter{0};
  static thread_local std::mt19937_64 random(std::random_device{}());
  return "." + std::to_string(::getpid()) + "." + std::to_string(counter++) +
         "." + llvm::utohexstr(random());
}

/// The GNU build id of the loaded object that holds `address`, as hex
/// ("" when it has none).
std::string buildIdAt(const void *address) {
  struct Search {
    uintptr_t address;
    std::string id;
    std::string path;
  } search{reinterpret_cast<uintptr_t>(address), {}, {}};
  dl_iterate_phdr(
      [](dl_phdr_info *info, size_t, void *data) -> int {
        auto *s = static_cast<Search *>(data);
        bool holds = false;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr) &ph = info->dlpi_phdr[i];
          uintptr_t start = info->dlpi_addr + ph.p_vaddr;
          if (ph.p_type == PT_LOAD && s->address >= start &&
              s->address < start + ph.p_memsz)
            holds = true;
        }
        if (!holds)
          return 0;
        s->path = info->dlpi_name;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr) &ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_NOTE)
            continue;
          const char *at =
              reinterpret_cast<const char *>(info->dlpi_addr + ph.p_vaddr);
          const char *end = at + ph.p_memsz;
          while (at + sizeof(ElfW(Nhdr)) <= end) {
            auto *note = reinterpret_cast<const ElfW(Nhdr) *>(at);
            const char *name = at + sizeof(ElfW(Nhdr));
            const char *desc = name + ((note->n_namesz + 3) & ~3u);
            if (desc + note->n_descsz > end)
              break;
            if (note->n_type == NT_GNU_BUILD_ID && note->n_namesz == 4 &&
                std::memcmp(name, "GNU", 4) == 0) {
              s->id = llvm::toHex(llvm::StringRef(desc, note->n_descsz),
                                  /*LowerCase=*/true);
              return 1;
            }
            at = desc + ((note->n_descsz + 3) & ~3u);
          }
        }
        return 1;
      },
      &search);
  if (!search.id.empty())
    return search.id;
  // No build id: the contents of the file (the main program's name is ""
  // in the list).
  std::string path = search.path.empty() ? "/proc/self/exe" : search.path;
  auto file = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                          /*RequiresNullTerminator=*/false);
  if (!file)
    return "";
  return "xxh3:" + llvm::utohexstr(llvm::xxh3_64bits(
                       llvm::arrayRefFromStringRef((*file)->getBuffer())));
}

std::mutex installedMutex;
std::shared_ptr<CompileCache> installed;

} // namespace

//===----------------------------------------------------------------------===//
// Keys and identity
//===----------------------------------------------------------------------===//

std::string CacheKey::hex() const {
  return llvm::toHex(llvm::ArrayRef<uint8_t>(bytes), /*LowerCase=*/true);
}

CacheKeyBuilder &CacheKeyBuilder::add(llvm::StringRef label,
                                      llvm::StringRef value) {
  std::string lengths;
  appendLE(lengths, label.size(), 8);
  appendLE(lengths, value.size(), 8);
  hasher.update(lengths);
  hasher.update(label);
  hasher.update(value);
  return *this;
}

CacheKey CacheKeyBuilder::finish() const {
  CacheKey key;
  key.bytes = llvm::BLAKE3(hasher).final();
  return key;
}

std::string kvir::compiler::toolchainIdentity() {
  static const std::string identity = [] {
    std::string text = "kvir " + kvirVersion();
    // The build of the compiler (its passes are linked where this is), of
    // MLIR's translation and of LLVM's code generator: a rebuild with other
    // sources makes other code under the same version.
    std::vector<std::string> builds;
    for (const void *address :
         {reinterpret_cast<const void *>(&toolchainIdentity),
          reinterpret_cast<const void *>(&mlir::translateModuleToLLVMIR),
          reinterpret_cast<const void *>(&llvm::sys::getHostCPUName)}) {
      std::string id = buildIdAt(address);
      if (std::find(builds.begin(), builds.end(), id) == builds.end())
        builds.push_back(id);
    }
    text += "; builds " + llvm::join(builds, ",");
    text += std::string("; llvm ") + llvmVersion() + " " + LLVM_VERSION_STRING;
    text += "; cpu " + llvm::sys::getHostCPUName().str();
    std::vector<std::string> features;
    for (const auto &[name, enabled] : llvm::sys::getHostCPUFeatures())
      features.push_back((enabled ? "+" : "-") + name.str());
    std::sort(features.begin(), features.end());
    text += " " + llvm::join(features, ",");
    return text;
  }();
  return identity;
}

std::string kvir::compiler::defaultCacheDirectory() {
  auto env = [](const char *name) {
    const char *value = std::getenv(name);
    return std::string(value ? value : "");
  };
  if (std::string dir = env("KVIR_CACHE_DIR"); !dir.empty())
    return dir;
  if (std::string dir = env("XDG_CACHE_HOME"); !dir.empty())
    return dir + "/kvir";
  if (std::string dir = env("HOME"); !dir.empty())
    return dir + "/.cache/kvir";
  return "";
}

//===----------------------------------------------------------------------===//
// The cache
//===----------------------------------------------------------------------===//

CompileCache::CompileCache(Config config)
    : config(std::move(config)), identityDigest(blake3(this->config.identity)) {
}

std::unique_ptr<CompileCache> CompileCache::open(const Config &config,
                                                 std::string &error) {
  if (config.directory.empty()) {
    error = "no cache directory (set KVIR_CACHE_DIR, XDG_CACHE_HOME or HOME)";
    return nullptr;
  }
  if (config.maxBytes == 0) {
    error = "the cache's bound must be positive";
    return nullptr;
  }
  if (std::error_code ec = llvm::sys::fs::create_directories(
          config.directory, /*IgnoreExisting=*/true,
          llvm::sys::fs::perms::owner_all)) {
    error = "cannot create the cache directory '" + config.directory +
            "': " + ec.message();
    return nullptr;
  }
  struct stat st;
  if (::stat(config.directory.c_str(), &st) != 0) {
    error =
        errnoText("cannot read the cache directory '" + config.directory + "'");
    return nullptr;
  }
  if (!S_ISDIR(st.st_mode)) {
    error = "the cache directory '" + config.directory + "' is not a directory";
    return nullptr;
  }
  // Entries are code this process runs: only its user may write them.
  if (st.st_uid != ::geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH))) {
    error = "the cache directory '" + config.directory +
            "' is not private to this user (owned by another or writable by "
            "others): not loading code from it";
    return nullptr;
  }
  return std::unique_ptr<CompileCache>(new CompileCache(config));
}

std::string CompileCache::entryPath(const CacheKey &key) const {
  // The identity is part of the name: builds of different versions (two
  // checkouts, an upgrade) keep their entries side by side.
  Digest name =
      blake3(bytesOf(identityDigest),
             llvm::StringRef(reinterpret_cast<const char *>(key.bytes.data()),
                             key.bytes.size()));
  return config.directory + "/" +
         llvm::toHex(llvm::ArrayRef<uint8_t>(name), /*LowerCase=*/true) +
         kEntrySuffix.str();
}

bool CompileCache::load(const CacheKey &key, CacheEntry &out,
                        std::string *why) {
  std::string path = entryPath(key);
  auto reject = [&](const std::string &reason) {
    ++rejected;
    if (why)
      *why = reason;
    return false;
  };
  // Read, not mapped: what is checked is what is used, whatever happens to
  // the file afterwards.
  auto file = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                          /*RequiresNullTerminator=*/false,
                                          /*IsVolatile=*/true);
  if (!file) {
    if (file.getError() == std::errc::no_such_file_or_directory) {
      ++misses;
      if (why)
        *why = "no entry";
      return false;
    }
    return reject("unreadable: " + file.getError().message());
  }
  llvm::StringRef data = (*file)->getBuffer();
  if (data.size() < kHeaderSize)
    return reject("shorter than its header");
  const char *at = data.data();
  if (std::memcmp(at, kMagic, sizeof(kMagic)) != 0)
    return reject("not an entry (bad magic)");
  if (readLE(at + 8, 4) != kFormat)
    return reject("stale: format " + std::to_string(readLE(at + 8, 4)));
  if (std::memcmp(at + 12, key.bytes.data(), 32) != 0)
    return reject("stale: another key");
  if (std::memcmp(at + 44, identityDigest.data(), 32) != 0)
    return reject("stale: another toolchain");
  uint64_t objectSize = readLE(at + 76, 8), metadataSize = readLE(at + 84, 8);
  uint64_t payload = data.size() - kHeaderSize;
  if (objectSize > payload || metadataSize != payload - objectSize)
    return reject("corrupt: its sizes do not match the file's");
  llvm::StringRef body = data.drop_front(kHeaderSize);
  if (std::memcmp(at + 92, blake3(body).data(), 32) != 0)
    return reject("corrupt: digest mismatch");
  out.object = body.take_front(objectSize).str();
  out.metadata = body.drop_front(objectSize).str();
  ++hits;
  // The time of use orders eviction: refresh it (a failure only makes the
  // entry look older).
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);
  return true;
}

bool CompileCache::store(const CacheKey &key, const CacheEntry &entry,
                         std::string &error) {
  std::string header(kMagic, sizeof(kMagic));
  appendLE(header, kFormat, 4);
  header += llvm::StringRef(reinterpret_cast<const char *>(key.bytes.data()),
                            key.bytes.size());
  header += bytesOf(identityDigest);
  appendLE(header, entry.object.size(), 8);
  appendLE(header, entry.metadata.size(), 8);
  llvm::BLAKE3 hasher;
  hasher.update(entry.object);
  hasher.update(entry.metadata);
  header += bytesOf(hasher.final());
  uint64_t total = header.size() + entry.object.size() + entry.metadata.size();
  auto failed = [&](const std::string &message) {
    ++storeFailures;
    error = message;
    return false;
  };
  if (total > config.maxBytes)
    return failed("the entry (" + std::to_string(total) +
                  " bytes) is larger than the cache's bound");
  std::string path = entryPath(key);
  std::string temp = path + uniqueSuffix() + kTempSuffix.str();
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    return failed(errnoText("cannot create '" + temp + "'"));
  bool written = writeAll(fd, header) && writeAll(fd, entry.object) &&
                 writeAll(fd, entry.metadata) && ::fsync(fd) == 0;
  std::string problem = written ? "" : errnoText("cannot write '" + temp + "'");
  if (::close(fd) != 0 && written) {
    written = false;
    problem = errnoText("cannot write '" + temp + "'");
  }
  if (!written || ::rename(temp.c_str(), path.c_str()) != 0) {
    if (written)
      problem = errnoText("cannot rename '" + temp + "'");
    ::unlink(temp.c_str());
    return failed(problem);
  }
  // The rename itself survives a crash once the directory is flushed.
  int dir =
      ::open(config.directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
  ++stored;
  evict();
  return true;
}

void CompileCache::evict() {
  struct File {
    std::string path;
    uint64_t size;
    struct timespec used;
  };
  std::vector<File> entries;
  uint64_t total = 0;
  DIR *dir = ::opendir(config.directory.c_str());
  if (!dir)
    return;
  auto now = std::chrono::system_clock::now();
  while (dirent *e = ::readdir(dir)) {
    llvm::StringRef name(e->d_name);
    bool isEntry = name.ends_with(kEntrySuffix);
    if (!isEntry && !name.ends_with(kTempSuffix))
      continue;
    std::string path = config.directory + "/" + name.str();
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
      continue;
    if (!isEntry) {
      // Another process may be writing it: only a long-abandoned one goes.
      auto age = now - std::chrono::system_clock::from_time_t(st.st_mtime);
      if (age > std::chrono::seconds(kStaleTempSeconds))
        ::unlink(path.c_str());
      continue;
    }
    entries.push_back({path, uint64_t(st.st_size), st.st_mtim});
    total += uint64_t(st.st_size);
  }
  ::closedir(dir);
  if (total <= config.maxBytes)
    return;
  std::sort(entries.begin(), entries.end(), [](const File &a, const File &b) {
    if (a.used.tv_sec != b.used.tv_sec)
      return a.used.tv_sec < b.used.tv_sec;
    return a.used.tv_nsec < b.used.tv_nsec;
  });
  for (const File &file : entries) {
    if (total <= config.maxBytes)
      break;
    // Another process may have removed it first; it is gone either way.
    if (::unlink(file.path.c_str()) == 0)
      ++evicted;
    total -= file.size;
  }
}

CacheStats CompileCache::stats() const {
  CacheStats s;
  s.hits = hits;
  s.misses = misses;
  s.rejected = rejected;
  s.stored = stored;
  s.storeFailures = storeFailures;
  s.evicted = evicted;
  return s;
}

void CompileCache::countUnusable() {
  --hits;
  ++rejected;
}

//===----------------------------------------------------------------------===//
// The process's cache
//===----------------------------------------------------------------------===//

void kvir::compiler::setCompileCache(std::shared_ptr<CompileCache> cache) {
  std::lock_guard<std::mutex> lock(installedMutex);
  installed = std::move(cache);
}

std::shared_ptr<CompileCache> kvir::compiler::compileCache() {
  std::lock_guard<std::mutex> lock(installedMutex);
  return installed;
}

bool kvir::compiler::installDefaultCompileCache(uint64_t maxBytes,
                                                std::string &error) {
  CompileCache::Config config;
  config.directory = defaultCacheDirectory();
  config.maxBytes = maxBytes;
  config.identity = toolchainIdentity();
  std::unique_ptr<CompileCache> cache = CompileCache::open(config, error);
  if (!cache)
    return false;
  setCompileCache(std::move(cache));
  return true;
}

std::string kvir::compiler::describeCacheStats(const CompileCache &cache) {
  CacheStats s = cache.stats();
  auto count = [](int64_t n, const char *one, const char *many) {
    return std::to_string(n) + " " + (n == 1 ? one : many);
  };
  std::string text = "compile cache: " + count(s.hits, "hit", "hits") + ", " +
                     count(s.misses, "miss", "misses") + ", " +
                     std::to_string(s.rejected) + " rejected, " +
                     std::to_string(s.stored) + " stored, " +
                     std::to_string(s.evicted) + " evicted";
  if (s.storeFailures)
    text += ", " + count(s.storeFailures, "store failed", "stores failed");
  return text + " (" + cache.directory() + ")";
}
