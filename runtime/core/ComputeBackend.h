//===- ComputeBackend.h - The math a kv program needs -----------*- C++ -*-===//
//
// A kv program, once planned by kv-optimize, needs math in two places: a
// prefill of new tokens over a view, and the K/V of tokens at one layer (for
// the deviation scan of a `fraction` repair budget). Everything else (slices,
// shifts, concatenation, bookkeeping) is view metadata the runtime core does.
//
// A ComputeBackend supplies that math: the reference oracle (plain C++,
// runtime/reference), generated CPU kernels (runtime/cpu), generated GPU
// kernels later. Errors follow the C ABI: a kvrt_status, the message in
// kvrt_last_error(); no exception escapes.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_CORE_COMPUTEBACKEND_H
#define KVIR_RUNTIME_CORE_COMPUTEBACKEND_H

#include "runtime/core/KVRuntime.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace kvir {

class ComputeBackend {
public:
  virtual ~ComputeBackend() = default;

  /// The backend's name as kv-run spells it (`reference`, `cpu`, `cuda`).
  virtual const char *name() const = 0;

  /// Prefills `n` tokens at positions pos .. pos+n-1 over `view`: each new
  /// token attends the view (a key counts iff its effective position is <= the
  /// query's) and the new tokens up to itself. The new K/V go to fresh sealed
  /// pages appended as one run labelled `label` (may be NULL); the new view is
  /// returned in `*out` (a new reference). `*logits` receives [n][vocab]
  /// floats, or only the last row ([1][vocab]) with `lastOnly`. On any error
  /// `view` and the pool are as they were.
  virtual kvrt_status prefill(const kvrt_model *model, const kvrt_view *view,
                              const int32_t *tokens, int64_t n, int64_t pos,
                              const char *label, bool lastOnly,
                              std::vector<float> *logits, kvrt_view **out) = 0;

  /// The K (rotated at its position) and V of layer `layer` of `n` tokens at
  /// positions pos .. pos+n-1 over `view`, as a prefill would compute them
  /// (running layers 0 .. layer only), without appending anything: `k` and
  /// `v` receive [n][kv_heads][head_size] floats each. Layer 0's K/V depend on
  /// the token and its position alone; layer 1 is the first whose K/V see the
  /// context.
  virtual kvrt_status layerKV(const kvrt_model *model, const kvrt_view *view,
                              const int32_t *tokens, int64_t n, int64_t pos,
                              int32_t layer, std::vector<float> *k,
                              std::vector<float> *v) = 0;
};

/// The reference oracle as a backend (runtime/reference).
std::unique_ptr<ComputeBackend> createReferenceBackend();

} // namespace kvir

#endif // KVIR_RUNTIME_CORE_COMPUTEBACKEND_H
