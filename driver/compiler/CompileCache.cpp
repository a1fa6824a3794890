//===- CompileCache.cpp - Compiled code kept on disk between runs -*- C++ -*-=//

#include "driver/compiler/CompileCache.h"

#include "driver/version/Version.h"

#include "mlir/Target/LLVMIR/Export.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/xxhash.h"
#include "llvm/TargetParser/Host.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

using namespace kvir;
using namespace kvir::compiler;

namespace {

constexpr char kMagic[8] = {'K', 'V', 'I', 'R', 'J', 'I', 'T', '\0'};
/// Bumped whenever the layout of an entry changes.
constexpr uint32_t kFormat = 1;
/// magic, format, key, identity digest, two sizes, payload digest.
constexpr size_t kHeaderSize = 8 + 4 + 32 + 32 + 8 + 8 + 32;
/// One of the suffixes cache::evict() counts as entries.
constexpr llvm::StringLiteral kEntrySuffix = ".kvjit";
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

/// The GNU build id of the loaded object that holds `address`, else a
/// digest of its file (the main program's name is "" in the list).
std::string buildIdAt(const void *address) {
  std::string path;
  std::string id = cache::buildIdAt(address, &path);
  if (!id.empty())
    return id;
  auto file =
      llvm::MemoryBuffer::getFile(path.empty() ? "/proc/self/exe" : path,
                                  /*IsText=*/false,
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

//===----------------------------------------------------------------------===//
// The cache
//===----------------------------------------------------------------------===//

CompileCache::CompileCache(Config config)
    : config(std::move(config)), identityDigest(blake3(this->config.identity)) {
}

std::unique_ptr<CompileCache> CompileCache::open(const Config &config,
                                                 std::string &error) {
  if (config.maxBytes == 0) {
    error = "the cache's bound must be positive";
    return nullptr;
  }
  if (!cache::openCacheDirectory(config.directory, error))
    return nullptr;
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
    ++counters.rejected;
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
      ++counters.misses;
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
  ++counters.hits;
  // The time of use orders eviction: refresh it (a failure only makes the
  // entry look older).
  cache::touch(path);
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
    ++counters.storeFailures;
    error = message;
    return false;
  };
  if (total > config.maxBytes)
    return failed("the entry (" + std::to_string(total) +
                  " bytes) is larger than the cache's bound");
  std::string problem;
  if (!cache::writeWhole(config.directory, entryPath(key),
                         {header, entry.object, entry.metadata}, problem))
    return failed(problem);
  ++counters.stored;
  evict();
  return true;
}

void CompileCache::evict() {
  counters.evicted += cache::evict(config.directory, config.maxBytes);
}

CacheStats CompileCache::stats() const { return counters.snapshot(); }

void CompileCache::countUnusable() { counters.countUnusable(); }

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
  return cache::describeCacheStats(cache.stats(), cache.directory());
}
