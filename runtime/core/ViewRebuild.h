//===- ViewRebuild.h - Views over pages a backend wrote ---------*- C++ -*-===//
//
// Internal to the runtime. A backend writes K/V into new pages, then builds
// a view over them: a prefill appends the run it wrote; kv.materialize
// rewrites the keys of every shifted run (delta != 0) into new pages and
// returns the view with those runs replaced. The backends (runtime/cpu,
// runtime/cuda, the oracle in runtime/reference) differ only in how they
// write the pages; the views are built here.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_CORE_VIEWREBUILD_H
#define KVIR_RUNTIME_CORE_VIEWREBUILD_H

#include "runtime/core/Support.h"

#include <vector>

namespace kvrt {

/// Where a shifted run's tokens go on its new pages.
enum class RewriteSlots {
  /// At the run's own slots, one new page per page of the run: the page
  /// lists are parallel, as the generated kernels write them.
  Same,
  /// From slot 0, on as few pages as the tokens fill (the oracle).
  Packed,
};

/// What appendPrefilled does with an unlabelled prefill that continues the
/// view's last run (unlabelled, unshifted, ending at its first position).
enum class TailPacking {
  /// A run of its own.
  Keep,
  /// One run with the last: where the new tokens fit on the last run's
  /// last page, that page's tokens are copied ahead of them on the
  /// prefill's page (open, in host memory), which replaces it; where the
  /// last run ends at a page's end, the new pages follow it. A decode step
  /// of one token then adds no run: attention takes a run at a time (its
  /// query rotated, its pages' softmax steps taken per run), so a run a
  /// token cost more than the token's bytes (docs/models.md).
  Pack,
};

/// `view` followed by the run a prefill wrote into `pages`, from slot 0 of
/// the first: `n` tokens at positions pos .. pos+n-1, labelled `label` (may
/// be NULL). The pages are sealed first, as a page must be to enter a view.
kvrt_status appendPrefilled(const kvrt_view *view, const PageRefs &pages,
                            const int32_t *tokens, int64_t n, int64_t pos,
                            const char *label, kvrt_view **out,
                            TailPacking packing = TailPacking::Keep);

/// The runs of a view being materialized and the new pages of the shifted
/// ones. The pages are held until this is destroyed: on an early return they
/// go back to the pool; a rebuilt view takes references of its own.
class ShiftedRuns {
public:
  /// A shifted run and the run it becomes: at position base_pos + delta
  /// with delta 0, on new pages.
  struct Shift {
    kvrt_run from, to;
  };

  ShiftedRuns() = default;
  ShiftedRuns(const ShiftedRuns &) = delete;
  ShiftedRuns &operator=(const ShiftedRuns &) = delete;

  /// Reads the runs of `view` and allocates the new pages of every shifted
  /// run, all before any work, so that exhaustion changes nothing. A
  /// shifted run that would start at a negative position is an error.
  kvrt_status collect(const kvrt_view *view, RewriteSlots slots);

  /// The shifted runs, in the view's order.
  const std::vector<Shift> &shifts() const { return shifted; }
  /// Their new pages, run after run (the `to` runs' pages point into it).
  const std::vector<int32_t> &pages() const { return held.pages; }

  /// Seals the new pages, which the backend has written, and returns in
  /// `*out` a view of every run in order, each shifted one replaced by the
  /// run it becomes.
  kvrt_status rebuild(kvrt_view **out);

private:
  std::vector<kvrt_run> runs;
  std::vector<Shift> shifted;
  PageRefs held{nullptr, {}};
};

} // namespace kvrt

#endif // KVIR_RUNTIME_CORE_VIEWREBUILD_H
