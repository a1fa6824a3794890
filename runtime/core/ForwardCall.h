//===- ForwardCall.h - Filling the generated forward's arguments *- C++ -*-===//
//
// What every backend that runs the generated forward does alike: the run
// table of a view, the embedding rows of the tokens, the weights in the order
// of their fields (ModelTensors.def, ForwardABI.def), and the sizes of the
// buffers a call needs. Memory placement (host or device) stays with the
// backend.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_CORE_FORWARDCALL_H
#define KVIR_RUNTIME_CORE_FORWARDCALL_H

#include "runtime/core/ForwardABI.h"
#include "runtime/core/KVRuntime.h"
#include "runtime/core/ModelTensors.h"

#include <array>
#include <cstdint>
#include <vector>

namespace kvir {

/// A view flattened for the forward: the page lists of its runs back to
/// back, and one RUNS row per run (ForwardABI.h).
struct RunTable {
  std::vector<int32_t> pages;
  std::vector<int64_t> rows;

  int64_t numRuns() const { return int64_t(rows.size()) / KVRT_RUN_WIDTH; }
  /// Appends a run (its page ids are copied).
  void append(const int32_t *runPages, int64_t nPages, int64_t slotBegin,
              int64_t nTokens, int64_t basePos, int64_t delta);
  /// Appends every run of `view`.
  kvrt_status appendView(const kvrt_view *view);
  /// Descriptors of the two arrays (host memory).
  kvrt_memref_i32 pagesRef();
  kvrt_memref_i64x2 rowsRef();
};

/// Attention tiles for the GPU forward (TILES rows: run, key_begin, key_end):
/// each run cut into tiles of at most some number of keys, so that a few
/// thousand blocks run for `queries` query tokens while the partials stay
/// under 256 MiB.
std::vector<int64_t> attentionTiles(const RunTable &table, int64_t queries,
                                    int64_t heads, int64_t headSize);

/// Floats of the attention partials the GPU forward keeps for `queries`
/// query tokens and `tiles` tiles.
int64_t attentionPartialFloats(const kvrt_model_config &config, int64_t queries,
                               int64_t tiles);

/// Floats of a prefill's scratch buffer: n * (3 dim + 2 kv_dim + 2 hidden).
int64_t prefillScratchFloats(const kvrt_model_config &config, int64_t n);

/// The embedding rows of `n` tokens (a copy, not math): [n][dim] floats.
std::vector<float> embedTokens(const kvrt_model_config &config,
                               const kvrt_model_weights &weights,
                               const int32_t *tokens, int64_t n);

/// How many weights the forward reads: the weight fields of its prefill
/// (ModelTensors.def's tensors read by the forward).
constexpr size_t kForwardWeights = kvrt::kNumForwardWeights;

/// The weights the forward reads, in the order of its weight fields
/// (ForwardABI.def).
using ForwardWeights = std::array<kvrt_weight, kForwardWeights>;
ForwardWeights forwardWeights(const kvrt_model_weights &weights);

/// The weight fields of `args`, in the same order.
std::array<kvrt_memref_weight *, kForwardWeights>
weightFields(kvrt_prefill_args &args);

/// The field of a weight whose data is at `data` (its host memory, or a
/// device copy of its bytes): addressed in the elements the forward reads
/// for its format.
kvrt_memref_weight memrefWeight(const kvrt_weight &weight, const void *data);

/// Fills every weight field of `args` with the weights in host memory.
void fillWeightFields(kvrt_prefill_args &args,
                      const kvrt_model_weights &weights);

/// Fails unless a view's pool `layout` is the shape of model `c` (layers,
/// KV heads, head size) and has the K/V element type `forward` was compiled
/// for, with a message that names both.
kvrt_status checkForwardLayout(const Forward &forward,
                               const kvrt_model_config &c,
                               const kvrt_page_layout &layout);

} // namespace kvir

#endif // KVIR_RUNTIME_CORE_FORWARDCALL_H
