//===- PrefixCache.h - Automatic prefix reuse across requests ---*- C++ -*-===//
//
// What vLLM's automatic prefix caching and llama.cpp's cache_prompt do: the
// K/V of token sequences the server computed (prompts and their
// continuations, contexts' exact prefixes) are kept as views of the pool,
// and a new request reuses the longest cached prefix of its tokens (a slice
// of that view: its pages are shared, reference counted) and prefills only
// the rest. Only K/V equal to a full prefill of its tokens enters (no
// composed, shifted or approximately edited runs). Entries are kept per
// tenant (a tenant never hits, or times, another's prompts) and dropped
// least recently used first.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_DRIVER_SERVER_PREFIXCACHE_H
#define KVIR_DRIVER_SERVER_PREFIXCACHE_H

#include "runtime/exec/Session.h"

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace kvir::serve {

class PrefixCache {
public:
  explicit PrefixCache(size_t capacity) : capacity(capacity) {}

  /// The longest cached prefix of `tokens` of `tenant`, at most `limit`
  /// tokens long: its length, and in `out` a view of its K/V (empty when
  /// 0).
  int64_t lookup(const std::string &tenant, const std::vector<int32_t> &tokens,
                 int64_t limit, exec::ViewRef &out);

  /// Keeps `view`, the K/V of `tokens` (as many as it holds) for `tenant`.
  /// An entry that is a prefix of it is replaced; one it is a prefix of is
  /// kept instead.
  void insert(const std::string &tenant, std::vector<int32_t> tokens,
              exec::ViewRef view);

  /// Drops the least recently used entry; false when there is none.
  bool evictOne();
  size_t size() const;
  int64_t evictions() const;

private:
  struct Entry {
    std::string tenant;
    std::vector<int32_t> tokens;
    exec::ViewRef view;
    uint64_t used = 0;
  };
  size_t capacity;
  mutable std::mutex mutex;
  std::vector<Entry> entries;
  uint64_t clock = 0;
  int64_t evicted = 0;
};

} // namespace kvir::serve

#endif // KVIR_DRIVER_SERVER_PREFIXCACHE_H
