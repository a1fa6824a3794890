//===- MergeQueue.h - Best-pair-first merging of symbols --------*- C++ -*-===//
//
// The merge loop both BPE kinds share: while some adjacent pair of symbols
// has a merge, merge the best pair (the leftmost on a tie). Rescanning every
// pair after each merge is quadratic; a heap of candidate pairs, with stale
// entries skipped when popped, picks the same pair each step: it orders by
// priority then by the left symbol's original index, and a merge keeps the
// left index, so original order is current order. Internal to runtime/core.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_CORE_TOKENIZER_MERGEQUEUE_H
#define KVIR_RUNTIME_CORE_TOKENIZER_MERGEQUEUE_H

#include <cstdint>
#include <optional>
#include <queue>
#include <utility>
#include <vector>

namespace kvrt::tok {

/// Merges `symbols` (token ids; a negative id never merges) in place.
/// `find(left, right)` gives the merge of two adjacent tokens as (priority,
/// merged token), a lower priority merging first, or nullopt.
template <typename Priority, typename Find>
void mergeSymbols(std::vector<int32_t> &symbols, Find find) {
  struct Symbol {
    int32_t id;
    bool alive;
    int64_t prev, next;
  };
  struct Candidate {
    Priority priority;
    int64_t left, right;
    int32_t leftId, rightId, merged;
  };
  auto worse = [](const Candidate &a, const Candidate &b) {
    return a.priority > b.priority ||
           (a.priority == b.priority && a.left > b.left);
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(worse)> heap(
      worse);
  int64_t n = static_cast<int64_t>(symbols.size());
  std::vector<Symbol> list(n);
  for (int64_t i = 0; i < n; ++i)
    list[i] = {symbols[i], true, i - 1, i + 1 < n ? i + 1 : -1};

  auto consider = [&](int64_t left, int64_t right) {
    if (left < 0 || right < 0 || list[left].id < 0 || list[right].id < 0)
      return;
    std::optional<std::pair<Priority, int32_t>> merge =
        find(list[left].id, list[right].id);
    if (merge)
      heap.push({merge->first, left, right, list[left].id, list[right].id,
                 merge->second});
  };
  for (int64_t i = 0; i + 1 < n; ++i)
    consider(i, i + 1);
  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    Symbol &left = list[c.left];
    // A merge changes the left symbol's id (to a longer piece) and kills the
    // right one, so an entry whose symbols live, side by side, with their
    // ids is a current pair.
    if (!left.alive || left.id != c.leftId || left.next != c.right ||
        !list[c.right].alive || list[c.right].id != c.rightId)
      continue;
    left.id = c.merged;
    left.next = list[c.right].next;
    list[c.right].alive = false;
    if (left.next >= 0)
      list[left.next].prev = c.left;
    consider(left.prev, c.left);
    consider(c.left, left.next);
  }
  symbols.clear();
  for (int64_t i = n > 0 ? 0 : -1; i >= 0; i = list[i].next)
    symbols.push_back(list[i].id);
}

} // namespace kvrt::tok

#endif // KVIR_RUNTIME_CORE_TOKENIZER_MERGEQUEUE_H
