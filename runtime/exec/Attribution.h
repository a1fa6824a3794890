//===- Attribution.h - Which segments' K/V drive an edited answer -*- C++ -*-=//
//
// Attribution by KV patching (activation patching on the cache, DESIGN §4):
// for an answer computed after an edit of segment E, how much of the change
// of the answer's logits each segment's K/V carries.
//
//   z_new  the answer's logits from a full prefill of the edited context;
//   z_old  the answer recomputed over the old context's K/V: E with its old
//          tokens and K/V, the segments after E reused and shifted by
//          Δ = len(E') - len(E) to their new positions (cot_slice's reuse
//          with nothing but the answer recomputed);
//   z_S    z_old with segment S's K/V taken from the full prefill of the
//          edited context;
//   recovered(S) = 1 - |z_S - z_new| / |z_old - z_new|
//
// with L2 norms over the answer's logits, all rows concatenated. 1: patching
// S alone gives the edited answer; 0: it changes nothing; it may leave [0, 1]
// (a patch can overshoot or move the answer away). Plain C++ over views and a
// ComputeBackend, no MLIR (docs/kv-run.md, "Attribution").
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_EXEC_ATTRIBUTION_H
#define KVIR_RUNTIME_EXEC_ATTRIBUTION_H

#include "runtime/exec/Session.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kvir::exec {

/// A segment of the context as the program declares it.
struct SegmentInfo {
  std::string name, kind;
};

/// What an attribution starts from: the operands of the edit and the answer.
struct AttributionRequest {
  /// The cache the edit was applied to; its runs are labelled with segment
  /// names and sit at positions 0..n-1.
  ViewRef oldCache;
  /// The edited segment and its new tokens.
  std::string edited;
  std::vector<int32_t> newTokens;
  /// The segment whose logits are the answer (after the edited one).
  std::string answer;
  /// The kinds of the context's segments, by name (for the table; a
  /// segment not listed gets kind "").
  std::vector<SegmentInfo> segments;
};

/// One row of the table.
struct SegmentAttribution {
  std::string segment, kind;
  /// Tokens of the segment in the edited context.
  int64_t tokens = 0;
  bool edited = false;
  /// |z_S - z_new| and recovered(S).
  double distance = 0, recovered = 0;
};

struct Attribution {
  std::string edited, answer;
  /// Rows of the answer; tokens of the edited segment before and after.
  int64_t answerRows = 0, oldTokens = 0, newTokens = 0;
  /// Tokens of the edited context up to the answer's last.
  int64_t contextTokens = 0;
  /// |z_old - z_new| and |z_new|.
  double oldDistance = 0, newNorm = 0;
  /// Every segment before the answer, in context order.
  std::vector<SegmentAttribution> segments;
  /// The prefills it took (the full prefill and one answer per patch).
  WorkStats work;
};

/// The L2 norm of a - b over `n` floats (double accumulation).
double l2Distance(const float *a, const float *b, size_t n);

/// |z_old - z_new| at or below this fraction of |z_new| is float rounding,
/// not a change of the answer (a chunked and a full prefill of the same
/// tokens differ by about 1e-7 of it): there is nothing to attribute.
constexpr double kAttributionMinChange = 1e-6;

/// recovered(S) for each `zPatched[S]`, from the answer's logits z_new,
/// z_old (all of the same size). False with `error` when z_old is z_new up
/// to kAttributionMinChange (the edit did not change the answer), never a
/// division by zero; `oldDistance` is set either way.
bool recoveredFractions(const std::vector<float> &zNew,
                        const std::vector<float> &zOld,
                        const std::vector<std::vector<float>> &zPatched,
                        std::vector<double> &recovered, double &oldDistance,
                        std::string &error);

/// Builds the edited context of `request`, computes z_new, z_old and z_S
/// for every segment before the answer on `backend`, and fills `out`. False
/// with `error` when the request does not describe an edit before an answer
/// of the old cache (segments absent or split, positions not 0..n-1, the
/// same tokens), when the edit does not change the answer, or when a
/// prefill fails.
bool attribute(ComputeBackend &backend, const Forward &forward,
               const kvrt_model *model, kvrt_pool *pool,
               const AttributionRequest &request, Attribution &out,
               std::string &error);

} // namespace kvir::exec

#endif // KVIR_RUNTIME_EXEC_ATTRIBUTION_H
