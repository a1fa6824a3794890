//===- HugePagesTest.cpp - Memory for streamed weights and K/V ------------===//
//
// The helpers of runtime/core/HugePages.h: alignment, a file mapped at a
// 2 MiB boundary with its bytes intact, and the count of huge-page bytes
// bounded by the ranges asked about (what the kernel grants varies by
// machine, so no test needs it to grant any).
//
//===----------------------------------------------------------------------===//

#include "runtime/core/HugePages.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

using namespace kvrt;

namespace {

uintptr_t address(const void *p) { return reinterpret_cast<uintptr_t>(p); }

TEST(HugePagesTest, LargeBuffersAreAlignedToHugePages) {
  std::unique_ptr<void, void (*)(void *)> large(
      allocateStreamed(4 * kHugePageBytes), std::free);
  ASSERT_NE(large, nullptr);
  EXPECT_EQ(address(large.get()) % kHugePageBytes, 0u);
  std::unique_ptr<void, void (*)(void *)> small(allocateStreamed(100, 64),
                                                std::free);
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(address(small.get()) % 64, 0u);
  // Zero bytes still give a pointer to free.
  std::unique_ptr<void, void (*)(void *)> empty(allocateStreamed(0), std::free);
  EXPECT_NE(empty, nullptr);
}

/// A file of `bytes` bytes whose byte i is i * 131 mod 251.
std::string patternFile(const std::string &name, size_t bytes) {
  std::string data(bytes, '\0');
  for (size_t i = 0; i < bytes; ++i)
    data[i] = char(i * 131 % 251);
  // In the working directory, one name per process (ctest runs tests in
  // parallel processes); removed by the test.
  std::string path =
      "hugepages-test-" + std::to_string(::getpid()) + "-" + name;
  std::ofstream(path, std::ios::binary)
      .write(data.data(), std::streamsize(data.size()));
  return path;
}

TEST(HugePagesTest, FilesAreMappedAtHugePageBoundaries) {
  for (size_t bytes : {size_t(100), 3 * kHugePageBytes + 12345}) {
    std::string path = patternFile("streamed.bin", bytes);
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    void *p = mapFileStreamed(fd, bytes);
    ::close(fd);
    ASSERT_NE(p, nullptr) << std::strerror(errno);
    if (bytes >= kHugePageBytes)
      EXPECT_EQ(address(p) % kHugePageBytes, 0u) << bytes;
    const auto *b = static_cast<const unsigned char *>(p);
    bool same = true;
    for (size_t i = 0; i < bytes && same; ++i)
      same = b[i] == (unsigned char)(i * 131 % 251);
    EXPECT_TRUE(same) << bytes;
    EXPECT_EQ(::munmap(p, bytes), 0);
    std::remove(path.c_str());
  }
}

TEST(HugePagesTest, HugePageBytesStayWithinTheRanges) {
  // 16 MiB touched (huge pages where the kernel grants them), of which only
  // the first 1 MiB and a 4 KiB stack object are asked about.
  size_t bytes = 8 * kHugePageBytes;
  std::unique_ptr<void, void (*)(void *)> buffer(allocateStreamed(bytes),
                                                 std::free);
  ASSERT_NE(buffer, nullptr);
  std::memset(buffer.get(), 1, bytes);
  char local[4096] = {};
  EXPECT_LE(hugePageBytes({{buffer.get(), size_t(1) << 20}}), uint64_t(1)
                                                                  << 20);
  EXPECT_LE(hugePageBytes({{buffer.get(), bytes}, {local, sizeof(local)}}),
            uint64_t(bytes) + sizeof(local));
  EXPECT_EQ(hugePageBytes({}), 0u);
  EXPECT_EQ(hugePageBytes({{local, 0}}), 0u);
}

} // namespace
