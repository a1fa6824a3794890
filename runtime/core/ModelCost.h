//===- ModelCost.h - Model FLOPs and K/V bytes of a computation -*- C++ -*-===//
//
// The cost units of docs/design.md ("Costs"), in one place for the planner's
// analysis, the execution runtime and kv-run's report: per computed token and
// layer 2·(dim·dim + 2·dim·kv_dim + dim·dim + 3·dim·hidden) + 4·ctx·dim
// (ctx = keys attended), plus 2·dim·vocab per logits row; K/V bytes of f32
// pages.
// Header-only and free of MLIR, so the runtime can use it.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_CORE_MODELCOST_H
#define KVIR_RUNTIME_CORE_MODELCOST_H

#include "runtime/core/KVRuntime.h"
#include "runtime/core/ModelConfig.h"

#include <algorithm>
#include <cstdint>

namespace kvir {

struct ModelCost {
  int64_t dim = 0, hidden = 0, layers = 0, kvDim = 0, vocab = 0;
  /// Bytes of one stored K/V element (4, or 2 on f16/bf16 pages).
  int64_t kvElementBytes = 4;

  static ModelCost of(const kvrt_model_config &c,
                      kvrt_kv_dtype dtype = KVRT_KV_F32) {
    ModelCost cost;
    cost.kvElementBytes = kvDtypeBytes(dtype);
    cost.dim = c.dim;
    cost.hidden = c.hidden_dim;
    cost.layers = c.n_layers;
    cost.kvDim = int64_t(c.n_kv_heads) * (c.dim / c.n_heads);
    cost.vocab = c.vocab_size;
    return cost;
  }

  /// FLOPs of one token that attends `ctx` keys (itself included), without
  /// logits.
  int64_t tokenFlops(int64_t ctx) const {
    int64_t projections =
        2 * (dim * dim + 2 * dim * kvDim + dim * dim + 3 * dim * hidden);
    return layers * (projections + 4 * ctx * dim);
  }

  /// FLOPs of the tokens at indices [begin, end) of a contiguous context, each
  /// attending every earlier token and itself.
  int64_t rangeFlops(int64_t begin, int64_t end) const {
    if (end <= begin)
      return 0;
    int64_t n = end - begin;
    int64_t keys = (begin + 1 + end) * n / 2; // sum over i of (i + 1)
    return tokenFlops(0) * n + layers * 4 * dim * keys;
  }

  /// FLOPs of layers 0 .. nLayers-1 only, for the tokens [begin, end).
  int64_t partialRangeFlops(int64_t begin, int64_t end, int64_t nLayers) const {
    return layers == 0 ? 0 : rangeFlops(begin, end) / layers * nLayers;
  }

  /// FLOPs of the deviation scan of a `fraction` repair over the tokens
  /// [begin, end): layers 0 and 1 (1 is the first layer whose K/V depend on
  /// the context), or the only layer of a one-layer model.
  int64_t scanRangeFlops(int64_t begin, int64_t end) const {
    return partialRangeFlops(begin, end, std::min<int64_t>(layers, 2));
  }

  int64_t logitsFlops(int64_t rows) const { return 2 * dim * vocab * rows; }

  /// A prefill of `n` tokens after `context` keys, with `rows` logits rows.
  int64_t prefillFlops(int64_t context, int64_t n, int64_t rows) const {
    return rangeFlops(context, context + n) + logitsFlops(rows);
  }

  /// Bytes of K/V `tokens` tokens write, over all layers.
  int64_t kvBytes(int64_t tokens) const {
    return tokens * layers * 2 * kvDim * kvElementBytes;
  }

  /// Bytes of K/V the tokens at indices [begin, end) of a contiguous context
  /// read, each attending every earlier token and itself.
  int64_t kvRangeReadBytes(int64_t begin, int64_t end) const {
    return end <= begin ? 0 : kvBytes((begin + 1 + end) * (end - begin) / 2);
  }
};

/// The cost of model `c` on the pages of `pool` (f32 if it has none).
inline ModelCost costOnPool(const kvrt_model_config &c, const kvrt_pool *pool) {
  kvrt_page_layout layout{};
  if (!pool || kvrt_pool_get_layout(pool, &layout) != KVRT_OK)
    return ModelCost::of(c);
  return ModelCost::of(c, layout.dtype);
}

} // namespace kvir

#endif // KVIR_RUNTIME_CORE_MODELCOST_H
