//===- Reference.h - The reference forward (test oracle) --------*- C++ -*-===//
//
// A plain C++ Llama forward over the runtime's paged KV views, accumulating in
// double. It is the oracle that generated kernels are tested against and the
// `reference` backend of kv-run; it favours readability over speed.
//
// Errors are reported like the C ABI: a kvrt_status, with the message in
// kvrt_last_error(). No exception escapes.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_REFERENCE_REFERENCE_H
#define KVIR_RUNTIME_REFERENCE_REFERENCE_H

#include "runtime/core/KVRuntime.h"

#include <cstdint>
#include <vector>

namespace kvir::reference {

/// Rotates the `headSize` values of `x` in place to position `pos`: each pair
/// (a, b) of the layout becomes (a cos - b sin, a sin + b cos) with the angle
/// pos * theta^(-2i/headSize), computed in double from the integer position.
void applyRope(double *x, int32_t headSize, int64_t pos,
               kvrt_rope_layout layout, double theta);

/// The same for a head of `config`'s shape and every RoPE setting of it:
/// its first ropeDims(config) dimensions rotate, pair i by the angle
/// pos * ropeFrequency(config, i) (runtime/core/ModelConfig.h).
void applyRope(double *x, const kvrt_model_config &config, int64_t pos);

/// How attention applies the position offset Δ of each run.
enum class ShiftMode {
  /// Rotate the query to m - Δ once per run, score against the stored keys,
  /// and merge the runs' partial softmaxes by log-sum-exp.
  Fused,
  /// Rotate every stored key by Δ, then one softmax over all keys.
  Materialized,
};

/// Attention of the n_heads query heads `q` ([n_heads][head_size], not yet
/// rotated) at position `m` over the keys of layer `layer` in `view`. A key
/// takes part iff its effective position (stored + Δ) is <= m. Writes
/// [n_heads][head_size] to `out`; a head that sees no key gets zeros.
kvrt_status attention(const kvrt_model_config &config, const kvrt_view *view,
                      int32_t layer, const double *q, int64_t m, ShiftMode mode,
                      double *out);

/// Prefills `n` tokens at positions pos .. pos+n-1 over `view`: each new token
/// attends the view (by the offset rule) and the new tokens up to itself. The
/// new K/V go to fresh sealed pages, appended to the view as one run labelled
/// `label` (may be NULL); the result is returned in `*out` (a new reference)
/// and the logits of the new positions logitsFrom .. n-1, [n -
/// logitsFrom][vocab], in `*logits` (every row by default; none, and no
/// classifier, when `logits` is null). On pool exhaustion nothing changes.
kvrt_status prefill(const kvrt_model *model, const kvrt_view *view,
                    const int32_t *tokens, int64_t n, int64_t pos,
                    const char *label, std::vector<float> *logits,
                    kvrt_view **out, int64_t logitsFrom = 0);

/// The K (rotated at pos + t) and V of layer `layer` of `n` tokens over
/// `view`, [n][kv_heads][head_size] each, as a prefill computes them (layers
/// 0 .. layer only, in scratch pages that are released again).
kvrt_status layerKV(const kvrt_model *model, const kvrt_view *view,
                    const int32_t *tokens, int64_t n, int64_t pos,
                    int32_t layer, std::vector<float> *k,
                    std::vector<float> *v);

/// The view with every run's offset applied to its keys: runs with Δ != 0 are
/// copied to fresh pages with keys rotated by R(Δ) (values copied) and stored
/// at base_pos + Δ with Δ = 0; other runs are shared. On exhaustion nothing
/// changes.
kvrt_status materialize(const kvrt_model *model, const kvrt_view *view,
                        kvrt_view **out);

} // namespace kvir::reference

#endif // KVIR_RUNTIME_REFERENCE_REFERENCE_H
