//===- HugePages.cpp - Memory for streamed weights and K/V ----------------===//

#include "runtime/core/HugePages.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <sys/mman.h>
#include <unistd.h>

using namespace kvrt;

void *kvrt::allocateStreamed(size_t bytes, size_t smallAlignment) {
  size_t alignment =
      bytes >= 4 * kHugePageBytes ? kHugePageBytes : smallAlignment;
  if (bytes > SIZE_MAX - alignment)
    return nullptr;
  size_t rounded =
      (std::max<size_t>(bytes, 1) + alignment - 1) / alignment * alignment;
  void *p = std::aligned_alloc(alignment, rounded);
#ifdef MADV_HUGEPAGE
  if (p && alignment == kHugePageBytes)
    (void)::madvise(p, rounded, MADV_HUGEPAGE); // advice only
#endif
  return p;
}

void *kvrt::mapFileStreamed(int fd, size_t size) {
  // Reserve room for an aligned start, then map the file over the reserved
  // range at that start and give back the rest: only an address congruent to
  // the file offset modulo 2 MiB lets the kernel map a 2 MiB folio whole.
  size_t slack = size >= kHugePageBytes ? kHugePageBytes : 0;
  if (size > SIZE_MAX - slack) {
    errno = ENOMEM;
    return nullptr;
  }
  void *reserved = ::mmap(nullptr, size + slack, PROT_NONE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (reserved == MAP_FAILED)
    return nullptr;
  auto base = reinterpret_cast<uintptr_t>(reserved);
  uintptr_t start = slack ? (base + slack - 1) / slack * slack : base;
  void *mapped = ::mmap(reinterpret_cast<void *>(start), size, PROT_READ,
                        MAP_PRIVATE | MAP_FIXED, fd, 0);
  if (mapped == MAP_FAILED) {
    int saved = errno;
    ::munmap(reserved, size + slack);
    errno = saved;
    return nullptr;
  }
  if (start > base)
    ::munmap(reserved, start - base);
  size_t pageBytes = size_t(::sysconf(_SC_PAGESIZE));
  uintptr_t end = (start + size + pageBytes - 1) / pageBytes * pageBytes;
  if (base + size + slack > end)
    ::munmap(reinterpret_cast<void *>(end), base + size + slack - end);
#ifdef MADV_HUGEPAGE
  (void)::madvise(mapped, size, MADV_HUGEPAGE); // advice only
#endif
  return mapped;
}

uint64_t kvrt::hugePageBytes(
    const std::vector<std::pair<const void *, size_t>> &ranges) {
  std::FILE *smaps = std::fopen("/proc/self/smaps", "re");
  if (!smaps)
    return 0;
  uint64_t total = 0;
  // The mapping being read: its bytes within `ranges`, and its huge-page
  // kB so far (anonymous, file or shmem PMD mappings).
  uint64_t overlap = 0, hugeKiB = 0;
  auto endMapping = [&] {
    total += std::min<uint64_t>(overlap, hugeKiB * 1024);
    overlap = hugeKiB = 0;
  };
  char line[512];
  while (std::fgets(line, sizeof(line), smaps)) {
    uintptr_t from, to;
    uint64_t kib;
    // A mapping's header line, "from-to perms offset dev inode path" (a
    // field's line, "Name: value", has no '-' after its first word).
    if (std::sscanf(line, "%" SCNxPTR "-%" SCNxPTR " ", &from, &to) == 2) {
      endMapping();
      for (const auto &[at, length] : ranges) {
        auto begin = reinterpret_cast<uintptr_t>(at);
        uintptr_t lo = std::max(begin, from), hi = std::min(begin + length, to);
        overlap += hi > lo ? hi - lo : 0;
      }
    } else if (std::sscanf(line, "AnonHugePages: %" SCNu64, &kib) == 1 ||
               std::sscanf(line, "FilePmdMapped: %" SCNu64, &kib) == 1 ||
               std::sscanf(line, "ShmemPmdMapped: %" SCNu64, &kib) == 1) {
      hugeKiB += kib;
    }
  }
  endMapping();
  std::fclose(smaps);
  return total;
}

bool kvrt::transparentHugePagesOff() {
  std::FILE *f =
      std::fopen("/sys/kernel/mm/transparent_hugepage/enabled", "re");
  if (!f)
    return false;
  char line[128] = {};
  bool off = std::fgets(line, sizeof(line), f) && std::strstr(line, "[never]");
  std::fclose(f);
  return off;
}
