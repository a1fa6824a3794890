//===- PrefixCache.cpp - Automatic prefix reuse across requests -*- C++ -*-===//

#include "driver/server/PrefixCache.h"

#include <algorithm>

using namespace kvir;
using namespace kvir::serve;

namespace {

int64_t commonPrefix(const std::vector<int32_t> &a,
                     const std::vector<int32_t> &b) {
  size_t n = std::min(a.size(), b.size()), i = 0;
  while (i < n && a[i] == b[i])
    ++i;
  return int64_t(i);
}

} // namespace

int64_t PrefixCache::lookup(const std::string &tenant,
                            const std::vector<int32_t> &tokens, int64_t limit,
                            exec::ViewRef &out) {
  std::lock_guard<std::mutex> lock(mutex);
  out.reset();
  Entry *best = nullptr;
  int64_t length = 0;
  for (Entry &e : entries) {
    if (e.tenant != tenant)
      continue;
    int64_t n = std::min(commonPrefix(e.tokens, tokens), limit);
    if (n > length) {
      length = n;
      best = &e;
    }
  }
  if (!best)
    return 0;
  kvrt_view *slice = nullptr;
  if (kvrt_view_slice(best->view.get(), 0, length, &slice))
    return 0;
  best->used = ++clock;
  out = exec::adoptView(slice);
  return length;
}

void PrefixCache::insert(const std::string &tenant, std::vector<int32_t> tokens,
                         exec::ViewRef view) {
  if (!view || capacity == 0)
    return;
  tokens.resize(size_t(std::min<int64_t>(int64_t(tokens.size()),
                                         kvrt_view_num_tokens(view.get()))));
  if (tokens.empty())
    return;
  std::lock_guard<std::mutex> lock(mutex);
  for (size_t i = 0; i < entries.size();) {
    Entry &e = entries[i];
    if (e.tenant == tenant) {
      int64_t common = commonPrefix(e.tokens, tokens);
      if (common == int64_t(tokens.size())) {
        // Already covered by a longer (or equal) entry.
        e.used = ++clock;
        return;
      }
      if (common == int64_t(e.tokens.size())) {
        entries.erase(entries.begin() + i);
        continue;
      }
    }
    ++i;
  }
  entries.push_back({tenant, std::move(tokens), std::move(view), ++clock});
  while (entries.size() > capacity) {
    auto oldest = std::min_element(
        entries.begin(), entries.end(),
        [](const Entry &a, const Entry &b) { return a.used < b.used; });
    entries.erase(oldest);
    ++evicted;
  }
}

bool PrefixCache::evictOne() {
  std::lock_guard<std::mutex> lock(mutex);
  if (entries.empty())
    return false;
  auto oldest = std::min_element(
      entries.begin(), entries.end(),
      [](const Entry &a, const Entry &b) { return a.used < b.used; });
  entries.erase(oldest);
  ++evicted;
  return true;
}

size_t PrefixCache::size() const {
  std::lock_guard<std::mutex> lock(mutex);
  return entries.size();
}

int64_t PrefixCache::evictions() const {
  std::lock_guard<std::mutex> lock(mutex);
  return evicted;
}
