//===- Measure.h - What runners measure beyond a run ------------*- C++ -*-===//
//
// The measurements kv-run reports next to a run: a full prefill of the same
// final context, greedy continuations, the fidelity of logits against it,
// and the views' tokens and positions they are computed from. No MLIR.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_EXEC_MEASURE_H
#define KVIR_RUNTIME_EXEC_MEASURE_H

#include "runtime/core/ComputeBackend.h"
#include "runtime/exec/Values.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kvir::exec {

/// Prefills `tokens` from position 0 into an empty view of `pool`, computing
/// logits of the last `rows` tokens only (split in two prefills when
/// rows > 1, which is the same math). An empty token list is an error.
bool fullPrefill(ComputeBackend &backend, const Forward &forward,
                 const kvrt_model *model, kvrt_pool *pool,
                 const std::vector<int32_t> &tokens, int64_t rows, Logits &out,
                 WorkStats &work, std::string &error);

/// Continues greedily from `logits` (its last row) and `cache` for `n`
/// tokens, one prefill per token; returns the tokens chosen.
bool greedyContinue(ComputeBackend &backend, const Forward &forward,
                    const kvrt_model *model, const Logits &logits,
                    ViewRef cache, int64_t n, std::vector<int32_t> &out,
                    std::string &error);

/// The tokens of every run of `view`, in order.
std::vector<int32_t> viewTokens(const kvrt_view *view);

/// Whether the effective positions of `view` are 0, 1, ..., n-1.
bool hasContiguousPositions(const kvrt_view *view);

/// The effective position after the last token of `view` (0 when empty).
int64_t endPosition(const kvrt_view *view);

/// The fidelity of `approx` against `full`, row by row (docs/design.md).
struct Fidelity {
  int64_t rows = 0;
  double cosineMin = 0, cosineMean = 0;
  double klMean = 0, klMax = 0;
  int64_t top1Agree = 0;
  double maxAbsDiff = 0;
};
Fidelity compareLogits(const float *approx, const float *full, int64_t rows,
                       int64_t vocab);

/// Indices of the `k` largest values of `row`, largest first.
std::vector<int32_t> topK(const float *row, int64_t vocab, int64_t k);

} // namespace kvir::exec

#endif // KVIR_RUNTIME_EXEC_MEASURE_H
