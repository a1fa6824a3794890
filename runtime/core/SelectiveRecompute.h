//===- SelectiveRecompute.h - Repair by K/V deviation -----------*- C++ -*-===//
//
// The run-time step of a `fraction = f` or `deviation = t` repair budget
// (kv.selective_recompute): of the tokens [begin, end) of a view, measure how
// much each one's values deviate from the stored ones under the new context,
// recompute the chosen ones and reuse the rest. `fraction` chooses the
// ceil(f * (end - begin)) tokens that deviate most; `deviation` every token
// whose relative deviation exceeds t.
// Backend-independent: the math goes through a ComputeBackend, the rest is
// view metadata.
//
#ifndef KVIR_RUNTIME_CORE_SELECTIVERECOMPUTE_H
#define KVIR_RUNTIME_CORE_SELECTIVERECOMPUTE_H

#include "runtime/core/ComputeBackend.h"

#include <cstdint>
#include <vector>

namespace kvir {

/// How a selective recompute chooses the tokens it recomputes.
enum class RepairSelection : int32_t {
  /// The ceil(f * n) tokens whose deviation (L2 norm) is largest.
  Fraction = 0,
  /// Every token whose relative deviation exceeds a threshold t > 0.
  Deviation = 1,
};

/// A selection and its amount: the fraction f or the threshold t.
struct RepairBudget {
  RepairSelection selection = RepairSelection::Fraction;
  double amount = 0;
};

/// What one selective recompute did, for cost reports.
struct SelectiveRecomputeStats {
  /// end - begin.
  int64_t candidates = 0;
  /// View token indices (of the input view) recomputed, ascending.
  std::vector<int64_t> chosen;
  /// Largest and smallest deviation (L2 norm) among the chosen tokens (0 if
  /// none).
  double maxDeviation = 0, minChosenDeviation = 0;
  /// The relative deviation of every candidate, in order; empty when nothing
  /// was scanned (a fraction that selects no token skips the scan).
  std::vector<double> relativeDeviation;
  /// Their largest value and mean (0 without a scan).
  double maxRelativeDeviation = 0, meanRelativeDeviation = 0;
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

/// The relative deviation of one token: ||fresh - stored|| / ||fresh||, L2
/// norms over its `n` values (all KV heads of the scanned layer), in double.
/// 0 when both are 0; +infinity when only the fresh values are 0.
double relativeDeviation(const float *fresh, const float *stored, int64_t n);

/// The indices of the `relative` deviations strictly above `threshold`,
/// ascending: the selection of a `deviation = threshold` budget.
std::vector<int64_t> selectAboveThreshold(const std::vector<double> &relative,
                                          double threshold);

/// The layer whose values the deviation scan compares: layer 1, the first
/// whose K/V depend on the context (layer 0's are a function of the token and
/// its position alone), or layer 0 for a one-layer model.
int32_t selectiveRecomputeScanLayer(int32_t nLayers);

/// For the tokens [begin, end) of `view`: computes their K/V at the scan layer
/// fresh with `backend.layerKV` (running `forward`) over view[0:begin], at
/// their effective positions (each run's tokens causally among themselves);
/// the deviation of a token is the L2 norm of its values fresh minus stored,
/// over all KV heads (values carry no position, so they compare without
/// rotating anything), its relative deviation that norm divided by the norm
/// of its fresh values (relativeDeviation). A Fraction budget chooses the
/// selectiveRecomputeCount(f, end - begin) tokens with the largest deviation
/// (ties go to the earlier token; no scan when that count is 0), a Deviation
/// budget every token whose relative deviation exceeds t (t > 0). The result
/// is view[0:begin], then [begin, end) rebuilt in order (runs of unchosen
/// tokens reused as slices that keep their offsets, each run of consecutive
/// chosen tokens prefilled over the view built so far at its effective
/// positions, keeping its run's label), then view[end:] unchanged; `view`
/// itself when no token is chosen.
///
/// On error `*out` is NULL and nothing the caller holds changed.
kvrt_status selectiveRecompute(ComputeBackend &backend, const Forward &forward,
                               const kvrt_model *model, const kvrt_view *view,
                               int64_t begin, int64_t end,
                               const RepairBudget &budget, kvrt_view **out,
                               SelectiveRecomputeStats *stats = nullptr);

/// The same with a Fraction budget of `fraction`.
inline kvrt_status
selectiveRecompute(ComputeBackend &backend, const Forward &forward,
                   const kvrt_model *model, const kvrt_view *view,
                   int64_t begin, int64_t end, double fraction, kvrt_view **out,
                   SelectiveRecomputeStats *stats = nullptr) {
  return selectiveRecompute(backend, forward, model, view, begin, end,
                            RepairBudget{RepairSelection::Fraction, fraction},
                            out, stats);
}

} // namespace kvir

#endif // KVIR_RUNTIME_CORE_SELECTIVERECOMPUTE_H
