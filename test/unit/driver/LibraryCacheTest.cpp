//===- LibraryCacheTest.cpp - Compiled code kept as libraries ---*- C++ -*-===//
//
// The cache kv-run loads its code from without LLVM
// (driver/cache/LibraryCache.h): a stored library is found again
// byte for byte; a damaged, truncated or misplaced entry is rejected; the
// directory's one bound evicts the least recently used entries of both
// kinds (libraries and the JIT's objects).
//
//===----------------------------------------------------------------------===//

#include "driver/cache/LibraryCache.h"

#include "test/unit/TestSupport.h"

#include "gtest/gtest.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fcntl.h>
#include <sys/stat.h>

using namespace kvir::cache;
using namespace kvir::test;

namespace {

namespace fs = std::filesystem;

std::unique_ptr<LibraryCache> openCache(const std::string &dir,
                                        const std::string &identity,
                                        uint64_t maxBytes = 1 << 30) {
  LibraryCache::Config config;
  config.directory = dir;
  config.identity = identity;
  config.maxBytes = maxBytes;
  std::string error;
  std::unique_ptr<LibraryCache> cache = LibraryCache::open(config, error);
  EXPECT_TRUE(cache) << error;
  return cache;
}

/// Bytes that stand for a library (the cache never looks inside).
std::string library(size_t size, char fill) { return std::string(size, fill); }

} // namespace

TEST(LibraryCacheTest, StoredLibraryIsFoundByteForByte) {
  TempDir dir;
  std::unique_ptr<LibraryCache> cache =
      openCache(dir.file("cache"), "identity A");
  ASSERT_TRUE(cache);
  std::string path, why;
  EXPECT_FALSE(cache->load("key 1", path, &why));
  EXPECT_EQ(why, "no entry");
  std::string error;
  ASSERT_TRUE(cache->store("key 1", library(5000, 'L'), error)) << error;
  ASSERT_TRUE(cache->load("key 1", path, &why)) << why;
  EXPECT_EQ(path, cache->entryPath("key 1"));
  // The library first, as the linker wrote it: the loader maps it from
  // offset 0.
  EXPECT_EQ(readFileBytes(path).substr(0, 5000), library(5000, 'L'));
  EXPECT_FALSE(cache->load("key 2", path));
  CacheStats s = cache->stats();
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.misses, 2);
  EXPECT_EQ(s.stored, 1);
  EXPECT_EQ(s.rejected, 0);
  // Private to the user: it holds code.
  struct stat st;
  ASSERT_EQ(::stat(dir.file("cache").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  // Another identity (another build, another CPU) does not see it.
  std::unique_ptr<LibraryCache> other =
      openCache(dir.file("cache"), "identity B");
  EXPECT_FALSE(other->load("key 1", path, &why));
  EXPECT_EQ(why, "no entry");
}

TEST(LibraryCacheTest, DamagedEntriesAreRejected) {
  TempDir dir;
  std::unique_ptr<LibraryCache> cache =
      openCache(dir.file("cache"), "identity A");
  ASSERT_TRUE(cache);
  std::string error, path, why;
  ASSERT_TRUE(cache->store("key 1", library(4096, 'L'), error)) << error;
  std::string entry = cache->entryPath("key 1");
  std::string good = readFileBytes(entry);

  std::string flipped = good;
  flipped[100] ^= 1;
  writeFileBytes(entry, flipped);
  EXPECT_FALSE(cache->load("key 1", path, &why));
  EXPECT_EQ(why, "corrupt: checksum mismatch");

  writeFileBytes(entry, good.substr(0, good.size() - 3));
  EXPECT_FALSE(cache->load("key 1", path, &why));
  EXPECT_EQ(why, "not an entry (bad magic)");

  writeFileBytes(entry, good.substr(0, 2000) + good.substr(good.size() - 48));
  EXPECT_FALSE(cache->load("key 1", path, &why));
  EXPECT_EQ(why, "corrupt: its sizes do not match the file's");

  // A whole entry under another key's name is not that key's.
  writeFileBytes(entry, good);
  writeFileBytes(cache->entryPath("key 2"), good);
  EXPECT_FALSE(cache->load("key 2", path, &why));
  EXPECT_EQ(why, "stale: another key");
  EXPECT_TRUE(cache->load("key 1", path, &why)) << why;
  EXPECT_EQ(cache->stats().rejected, 4);

  // A store over a rejected entry makes it whole again.
  ASSERT_TRUE(cache->store("key 2", library(10, 'M'), error)) << error;
  EXPECT_TRUE(cache->load("key 2", path, &why)) << why;
}

TEST(LibraryCacheTest, OneBoundForBothKinds) {
  TempDir dir;
  std::string root = dir.file("cache");
  std::unique_ptr<LibraryCache> cache =
      openCache(root, "identity A", /*maxBytes=*/10000);
  ASSERT_TRUE(cache);
  // A JIT object (CompileCache's kind), the oldest entry.
  writeFileBytes(root + "/old.kvjit", std::string(4000, 'J'));
  struct timespec times[2] = {{1000, 0}, {1000, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, (root + "/old.kvjit").c_str(), times, 0), 0);
  std::string error, path;
  ASSERT_TRUE(cache->store("key 1", library(4000, 'A'), error)) << error;
  EXPECT_EQ(cache->stats().evicted, 0);
  // Over the bound: the JIT object goes first, then the older library.
  ASSERT_TRUE(cache->store("key 2", library(4000, 'B'), error)) << error;
  EXPECT_FALSE(fs::exists(root + "/old.kvjit"));
  EXPECT_EQ(cache->stats().evicted, 1);
  ASSERT_TRUE(cache->store("key 3", library(4000, 'C'), error)) << error;
  EXPECT_EQ(cache->stats().evicted, 2);
  EXPECT_FALSE(cache->load("key 1", path));
  EXPECT_TRUE(cache->load("key 3", path));
  // An entry larger than the bound is not written at all.
  EXPECT_FALSE(cache->store("key 4", library(20000, 'D'), error));
  EXPECT_NE(error.find("larger than the cache's bound"), std::string::npos)
      << error;
  EXPECT_EQ(cache->stats().storeFailures, 1);
}

TEST(LibraryCacheTest, IdentityNamesTheBuildsAndTheCpu) {
  std::string cpu = hostCpuIdentity();
  EXPECT_FALSE(cpu.empty());
  EXPECT_EQ(cpu, hostCpuIdentity());
  std::string a = libraryIdentity("/proc/self/exe");
  EXPECT_NE(a.find("; cpu " + cpu), std::string::npos) << a;
  // A compiler that is not there, or another one, is another identity.
  EXPECT_NE(libraryIdentity("/nonexistent/kv-aot"), a);
  EXPECT_NE(libraryIdentity("/nonexistent/kv-aot").find("absent"),
            std::string::npos);
}

TEST(LibraryCacheTest, UnsafeDirectoryIsRefused) {
  TempDir dir;
  std::string root = dir.file("shared");
  ASSERT_EQ(::mkdir(root.c_str(), 0777), 0);
  ASSERT_EQ(::chmod(root.c_str(), 0777), 0);
  LibraryCache::Config config;
  config.directory = root;
  config.identity = "A";
  std::string error;
  EXPECT_FALSE(LibraryCache::open(config, error));
  EXPECT_NE(error.find("not private to this user"), std::string::npos) << error;
}
