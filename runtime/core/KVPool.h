//===- KVPool.h - Paged KV pool and views inside the runtime ----*- C++ -*-===//
//
// The concrete types behind kvrt_pool and kvrt_view. The pool owns one arena
// of fixed-size pages with a reference count and a sealed bit each; a view is
// an immutable list of runs holding one page reference per page it lists.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_CORE_KVPOOL_H
#define KVIR_RUNTIME_CORE_KVPOOL_H

#include "runtime/core/KVRuntime.h"

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace kvrt {

/// Positions and offsets stay within +-2^53, where doubles are exact.
constexpr int64_t kMaxPosition = KVRT_MAX_POSITION;

/// One run of a view, owning copies of its page list, tokens and label.
struct Run {
  std::vector<int32_t> pages;
  int64_t slotBegin = 0;
  int64_t nTokens = 0;
  int64_t basePos = 0;
  int64_t delta = 0;
  std::vector<int32_t> tokens;
  bool hasLabel = false;
  std::string label;
};

} // namespace kvrt

struct kvrt_pool {
  kvrt_pool(const kvrt_pool_config &config, unsigned char *arena);
  ~kvrt_pool();

  /// True if `page` is a valid id of a page in use. Needs `mutex`.
  bool inUse(int32_t page) const;
  /// Adds one reference to each page of `runs`. Needs `mutex`.
  void retainRuns(const std::vector<kvrt::Run> &runs);
  /// Drops one reference per page of `runs`. Needs `mutex`.
  void releaseRuns(const std::vector<kvrt::Run> &runs);
  /// Drops one reference to an in-use page. Needs `mutex`.
  void releasePage(int32_t page);
  /// Pops `count` free pages, zero-filled, refcount 1; the caller checked
  /// there are enough. Needs `mutex`.
  void allocate(int64_t count, int32_t *pages);
  /// The first byte of page `page`.
  unsigned char *pageAddress(int32_t page) const {
    return arena + page * layout.page_bytes;
  }

  std::atomic<int64_t> refs{1};
  kvrt_pool_config config;
  kvrt_page_layout layout;
  unsigned char *arena;
  mutable std::mutex mutex;
  std::vector<uint32_t> refcount;
  std::vector<uint8_t> sealed;
  /// Free page ids; the next allocation takes from the back.
  std::vector<int32_t> freeList;
  int64_t pagesInUse = 0;
  int64_t peakPages = 0;
};

struct kvrt_view {
  /// A view over `pool` holding `runs`; retains the pool and every page.
  kvrt_view(kvrt_pool *pool, std::vector<kvrt::Run> runs);
  ~kvrt_view();

  std::atomic<int64_t> refs{1};
  kvrt_pool *pool;
  std::vector<kvrt::Run> runs;
  int64_t nTokens = 0;
};

#endif // KVIR_RUNTIME_CORE_KVPOOL_H
