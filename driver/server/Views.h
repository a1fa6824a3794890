//===- Views.h - View bookkeeping of kv-serve's contexts --------*- C++ -*-===//
//
// What the server does to its contexts' caches besides prefilling them,
// all through the runtime's C ABI (KVRuntime.h) and none of it math:
// labelling the runs by segment (a plan's program finds its segments by
// label; the server relabels a cache to the plan's canonical groups and
// back), and compacting the one-token runs decoding leaves into one run on
// fresh pages by copying their K/V bit for bit.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_DRIVER_SERVER_VIEWS_H
#define KVIR_DRIVER_SERVER_VIEWS_H

#include "runtime/exec/Session.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kvir::serve {

/// A stretch of a view's tokens and the label its runs get.
struct Part {
  std::string label;
  int64_t tokens = 0;
};

/// `view` with its runs cut at the boundaries of `parts` and labelled by
/// them (pages are shared, nothing is copied). The parts must cover the
/// view's tokens exactly. False with `error` otherwise.
bool relabel(const kvrt_view *view, const std::vector<Part> &parts,
             exec::ViewRef &out, std::string &error);

/// `view` with the runs of its tokens [begin, end) merged into one run on
/// fresh sealed pages, their K/V copied bit for bit, when those runs hold
/// whole runs with consecutive stored positions, one offset and one label
/// (what decoding one token at a time leaves); `merged` says whether it
/// was done (else `out` is `view`). False with `error` when the pool has no
/// room, with `out` untouched.
bool compact(const kvrt_view *view, int64_t begin, int64_t end,
             exec::ViewRef &out, bool &merged, std::string &error);

/// The effective position of every token of `view`.
std::vector<int64_t> effectivePositions(const kvrt_view *view);

/// Tokens [begin, end) of `view` (a new reference). Null with `error`.
exec::ViewRef sliceView(const kvrt_view *view, int64_t begin, int64_t end,
                        std::string &error);

} // namespace kvir::serve

#endif // KVIR_DRIVER_SERVER_VIEWS_H
