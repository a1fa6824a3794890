//===- SelectiveRecompute.h - Repair by first-layer deviation ---*- C++ -*-===//
//
// The run-time step of a `fraction = f` repair budget (kv.selective_recompute):
// of the tokens [begin, end) of a view, recompute the ceil(f * (end - begin))
// whose first-layer K/V deviate most from the stored ones, reuse the rest.
// Backend-independent: the math goes through a ComputeBackend, the rest is
// view metadata.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_CORE_SELECTIVERECOMPUTE_H
#define KVIR_RUNTIME_CORE_SELECTIVERECOMPUTE_H

#include "runtime/core/ComputeBackend.h"

#include <cstdint>
#include <vector>

namespace kvir {

/// What one selective recompute did, for cost reports.
struct SelectiveRecomputeStats {
  /// end - begin.
  int64_t candidates = 0;
  /// View token indices (of the input view) recomputed, ascending.
  std::vector<int64_t> chosen;
  /// Largest and smallest deviation among the chosen tokens (0 if none).
  double maxDeviation = 0, minChosenDeviation = 0;
  /// One entry per backend call: the keys already in the view it ran over
  /// and the number of tokens it computed. `firstLayer` calls computed layer
  /// 0 only (the deviation scan); the others are prefills of all layers with
  /// the last row's logits.
  struct Call {
    int64_t contextTokens;
    int64_t tokens;
    bool firstLayer;
  };
  std::vector<Call> calls;
};

/// The number of tokens a fraction `f` of `n` candidates selects:
/// ceil(f * n), with a tolerance of 1e-9 so that 0.15 * 120 gives 18.
int64_t selectiveRecomputeCount(double fraction, int64_t n);

/// For the tokens [begin, end) of `view`: computes their layer-0 K/V fresh
/// with `backend.firstLayerKV` over view[0:begin], at their stored positions
/// so they compare with the stored keys in the same frame; the deviation of a
/// token is the L2 norm of (K, V) fresh minus stored over all KV heads. The
/// selectiveRecomputeCount(fraction, end - begin) tokens with the largest
/// deviation are chosen (ties go to the earlier token). The result is
/// view[0:begin], then [begin, end) rebuilt in order (runs of unchosen tokens
/// reused as slices that keep their offsets, each run of consecutive chosen
/// tokens prefilled over the view built so far at its effective positions,
/// keeping its run's label), then view[end:] unchanged.
///
/// Note: layer-0 K/V depend on the token and its position only, not on the
/// context, so with a deterministic backend every deviation is 0 and the
/// choice falls to the tie rule (the first tokens of the range). A
/// context-dependent criterion needs the K/V of a later layer.
///
/// On error `*out` is NULL and nothing the caller holds changed.
kvrt_status selectiveRecompute(ComputeBackend &backend, const kvrt_model *model,
                               const kvrt_view *view, int64_t begin,
                               int64_t end, double fraction, kvrt_view **out,
                               SelectiveRecomputeStats *stats = nullptr);

} // namespace kvir

#endif // KVIR_RUNTIME_CORE_SELECTIVERECOMPUTE_H
