//===- HugePages.h - Memory for streamed weights and K/V --------*- C++ -*-===//
//
// Decode reads every weight once a token and attention reads the whole K/V:
// long streams, whose speed on one core depends on the page size under them.
// On 4 KiB pages every 4 KiB of a stream costs a TLB miss, and a core reads
// about a quarter less per second than on 2 MiB pages (docs/models.md,
// "Weights on 2 MiB pages"). These helpers give the streams 2 MiB pages where
// the kernel grants them: buffers aligned to them and advised to be backed by
// transparent huge pages, file mappings aligned the same way, and the count
// of a range's bytes that are.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_CORE_HUGEPAGES_H
#define KVIR_RUNTIME_CORE_HUGEPAGES_H

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace kvrt {

/// The size of the huge pages asked for: x86-64's and AArch64's PMD size.
constexpr size_t kHugePageBytes = size_t(2) << 20;

/// `bytes` of uninitialised memory for std::free: at least `bytes` rounded up
/// to the alignment; when `bytes` is at least four huge pages, aligned to
/// kHugePageBytes and advised MADV_HUGEPAGE (advice only: the kernel may
/// keep 4 KiB pages), else aligned to `smallAlignment`. Null when the memory
/// is not there.
void *allocateStreamed(size_t bytes, size_t smallAlignment = 64);

/// Maps `size` bytes of the open file `fd` read-only and private from offset
/// 0 at an address aligned to kHugePageBytes, advised MADV_HUGEPAGE: a file
/// system that caches the file in 2 MiB folios can then map them whole, and
/// pages faulted in afresh are read in such folios. Returns the address, or
/// null with errno set. Unmap with munmap(address, size).
void *mapFileStreamed(int fd, size_t size);

/// Of the bytes in `ranges` (address, length), how many lie on huge pages
/// now: for each mapping of the process (/proc/self/smaps) that backs part of
/// them with huge pages, the smaller of that part and its huge-page bytes.
/// 0 where the kernel does not say (no /proc, another OS).
uint64_t
hugePageBytes(const std::vector<std::pair<const void *, size_t>> &ranges);

/// Whether transparent huge pages are off on this system
/// (/sys/kernel/mm/transparent_hugepage/enabled selects "never"): no buffer
/// or mapping of the process gets 2 MiB pages. False where the file cannot
/// be read.
bool transparentHugePagesOff();

} // namespace kvrt

#endif // KVIR_RUNTIME_CORE_HUGEPAGES_H
