//===- SelectiveRecompute.h - Repair by K/V deviation -----------*- C++ -*-===//
//
// The run-time step of a `fraction = f` repair budget (kv.selective_recompute):
// of the tokens [begin, end) of a view, recompute the ceil(f * (end - begin))
// whose values deviate most from the stored ones under the new context, and
// reuse the rest.
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
  /// One entry per backend call: the keys already in the view it ran over,
  /// the number of tokens it computed and how many layers it ran: the
  /// deviation scan runs kSelectiveRecomputeScanLayers layers, the prefills
  /// of the chosen tokens all of them (with the last row's logits).
  struct Call {
    int64_t contextTokens;
    int64_t tokens;
    int32_t layers;
    /// True for the deviation scan, false for a prefill of chosen tokens.
    bool scan;
  };
  std::vector<Call> calls;
};

/// The number of tokens a fraction `f` of `n` candidates selects:
/// ceil(f * n), with a tolerance of 1e-9 so that 0.15 * 120 gives 18.
int64_t selectiveRecomputeCount(double fraction, int64_t n);

/// The layer whose values the deviation scan compares: layer 1, the first
/// whose K/V depend on the context (layer 0's are a function of the token and
/// its position alone), or layer 0 for a one-layer model.
int32_t selectiveRecomputeScanLayer(int32_t nLayers);

/// For the tokens [begin, end) of `view`: computes their K/V at the scan layer
/// fresh with `backend.layerKV` (running `forward`) over view[0:begin], at
/// their effective positions (each run's tokens causally among themselves); the
/// deviation of a token is the L2 norm of its values fresh minus stored, over
/// all KV heads (values carry no position, so they compare without rotating
/// anything). The selectiveRecomputeCount(fraction, end - begin) tokens with
/// the largest deviation are chosen (ties go to the earlier token). The result
/// is view[0:begin], then [begin, end) rebuilt in order (runs of unchosen
/// tokens reused as slices that keep their offsets, each run of consecutive
/// chosen tokens prefilled over the view built so far at its effective
/// positions, keeping its run's label), then view[end:] unchanged.
///
/// On error `*out` is NULL and nothing the caller holds changed.
kvrt_status selectiveRecompute(ComputeBackend &backend, const Forward &forward,
                               const kvrt_model *model, const kvrt_view *view,
                               int64_t begin, int64_t end, double fraction,
                               kvrt_view **out,
                               SelectiveRecomputeStats *stats = nullptr);

} // namespace kvir

#endif // KVIR_RUNTIME_CORE_SELECTIVERECOMPUTE_H
