//===- ModelConfig.h - The one model and KV configuration -------*- C++ -*-===//
//
// What generated code is specialised for, shared by the compiler and the
// runtime: the architecture of a model (kvrt_model_config without its file
// fields) and the element type of its K/V pages. One validation, one key,
// one symbol prefix, one spelling of every enum. Plain C++, no MLIR: the
// dialect converts `!kv.model` to and from this (ModelType::getConfig,
// ModelType::get), the runtime checks loaded models with it.
//
// Adding a RoPE variant touches: the `KV_RopeLayout` attribute
// (dialects/KV/KVAttrs.td), kvrt_rope_layout and ropePair() below, the
// builder's RoPE helper (ForwardEmitter::ropePair in
// passes/Conversion/Forward/ForwardEmitter.cpp) and the oracle
// (runtime/reference/Reference.cpp, through ropePair()). Every switch over
// the enum is exhaustive, so the compiler points at each place. Frequency
// variants (partial rotary, linear scaling, per-pair factors) are fields of
// the config, not layouts: ropeFrequency() below is their one definition,
// which the builder (ForwardEmitter::ropeCosSin) and the oracle follow.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_CORE_MODELCONFIG_H
#define KVIR_RUNTIME_CORE_MODELCONFIG_H

#include "runtime/core/KVRuntime.h"
#include "runtime/core/WeightFormat.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvir {

/// The spelling of a RoPE layout in IR, keys and messages.
const char *ropeLayoutName(kvrt_rope_layout layout);
/// A layout by its name, or by llama.cpp's name for it: `normal` is
/// `interleaved`, `neox` is `half`.
std::optional<kvrt_rope_layout> parseRopeLayout(std::string_view name);
/// llama.cpp's name of a layout (`normal`, `neox`).
const char *ropeLayoutLlamaCppName(kvrt_rope_layout layout);

/// The spelling of a K/V element type (`f32`, `f16`, `bf16`).
const char *kvDtypeName(kvrt_kv_dtype dtype);
std::optional<kvrt_kv_dtype> parseKvDtype(std::string_view name);
/// "" if `dtype` (as a caller of the C ABI passed it) is a K/V element type,
/// else what is wrong with it: `dtype = 7 is not f32 (0), f16 (1) or bf16
/// (2)`. Read as the integer the ABI passes (the enum may hold anything), so
/// the check itself never loads an invalid enum value.
std::string describeKvDtypeError(const kvrt_kv_dtype &dtype);
/// Bytes of one element.
int64_t kvDtypeBytes(kvrt_kv_dtype dtype);
/// The K/V element type a config key (configKey) names; f32 for a null key
/// or one without "kv=".
std::optional<kvrt_kv_dtype> kvDtypeOfKey(const char *key);

/// The dimensions of a head that RoPE pair `i` (0 <= i < headSize / 2)
/// rotates together, when the first `rotaryDims` dimensions rotate (even,
/// <= headSize). The pairs i >= rotaryDims / 2 are the dimensions that pass
/// through, (rotaryDims + 2j, rotaryDims + 2j + 1) with j = i - rotaryDims
/// / 2: their frequency is 0 (ropeFrequency), so every target can rotate
/// all headSize / 2 pairs and leave them unchanged.
inline std::pair<int32_t, int32_t> ropePair(kvrt_rope_layout layout,
                                            int32_t headSize,
                                            int32_t rotaryDims, int32_t i) {
  (void)headSize;
  int32_t rotaryPairs = rotaryDims / 2;
  if (i >= rotaryPairs)
    return {rotaryDims + 2 * (i - rotaryPairs),
            rotaryDims + 2 * (i - rotaryPairs) + 1};
  switch (layout) {
  case KVRT_ROPE_INTERLEAVED:
    return {2 * i, 2 * i + 1};
  case KVRT_ROPE_HALF:
    return {i, i + rotaryPairs};
  }
  return {0, 0}; // unreachable: the switch is exhaustive
}

/// The same with the whole head rotary.
inline std::pair<int32_t, int32_t> ropePair(kvrt_rope_layout layout,
                                            int32_t headSize, int32_t i) {
  return ropePair(layout, headSize, headSize, i);
}

/// What is wrong with the architecture of `config` (sizes, divisibility, an
/// even head size, a known RoPE layout, positive finite theta and eps), or
/// "" when it is valid. The file fields (seq_len, shared_classifier) are not
/// part of the architecture; kvrt_model_config_validate checks them too.
std::string describeArchitectureError(const kvrt_model_config &config);

/// The key of what generated code is specialised for: every architecture
/// field (theta and eps by their bits) and the K/V element type, as one
/// line. Two configs with the same key run the same code.
std::string configKey(const kvrt_model_config &config, kvrt_kv_dtype dtype);

/// The key of a generated forward: configKey() and, unless every weight it
/// reads is f32, " weights=" and the formats' spec (WeightFormat.h). A
/// forward runs only a model with the same key (ComputeBackend.h).
std::string forwardKey(const kvrt_model_config &config, kvrt_kv_dtype dtype,
                       const WeightFormats &formats);

/// What forwardKey() names, read back: the config (its file fields,
/// seq_len and shared_classifier, zero: no forward depends on them), the K/V
/// element type and the weights' formats; false with `error` for a key
/// forwardKey() cannot have written or a config describeArchitectureError()
/// refuses. For a process that compiles the forward another one runs (kv-run
/// asks kv-aot for it).
bool parseForwardKey(std::string_view key, kvrt_model_config &config,
                     kvrt_kv_dtype &dtype, WeightFormats &formats,
                     std::string &error);

/// The prefix of the generated functions of one forward in a module:
/// `kv_fwd_` and 16 hex digits of a hash of forwardKey() (all-f32 weights
/// where not given).
std::string forwardPrefix(const kvrt_model_config &config, kvrt_kv_dtype dtype,
                          const WeightFormats &formats = WeightFormats());

/// Derived sizes.
inline int32_t headSize(const kvrt_model_config &c) {
  return c.dim / c.n_heads;
}
inline int32_t kvDim(const kvrt_model_config &c) {
  return c.n_kv_heads * headSize(c);
}

//===----------------------------------------------------------------------===//
// RoPE frequencies
//===----------------------------------------------------------------------===//

/// The dimensions RoPE rotates: rope_dim, or the head size when it is 0.
inline int32_t ropeDims(const kvrt_model_config &c) {
  return c.rope_dim ? c.rope_dim : headSize(c);
}

/// The linear scaling factor in effect (1 where rope_scale is 0).
inline double ropeScale(const kvrt_model_config &c) {
  return c.rope_scale == 0.0 ? 1.0 : c.rope_scale;
}

/// Whether some frequency is divided by something other than 1: linear
/// scaling or per-pair factors.
bool ropeHasFrequencyDivisor(const kvrt_model_config &c);

/// What the base frequency of rotary pair `i` is divided by: its factor
/// (1 without factors) times the linear scale, in double.
double ropeFrequencyDivisor(const kvrt_model_config &c, int32_t i);

/// The angular frequency of RoPE pair `i` (0 <= i < head size / 2), in
/// radians per position: pow(theta, -2i / d) / ropeFrequencyDivisor(c, i)
/// for the d = ropeDims(c) rotary dimensions, 0 for the pairs beyond them.
/// The angle at position p is double(p) times this: linear in p, so
/// R(a) R(b) = R(a + b) holds under every variant, and a RoPE shift by an
/// integer Δ stays exact. The generated forward computes the same
/// expression in the same order (ForwardEmitter::ropeCosSin).
double ropeFrequency(const kvrt_model_config &c, int32_t i);

/// Llama 3's frequency factors (as HF's `rope_type = "llama3"` and llama.cpp's
/// converter compute them) for `rotaryDims` dimensions with base `theta`:
/// 1 for wavelengths under original / high, `factor` above original / low,
/// and 1 / ((1 - s) / factor + s) between, s = (original / wavelength - low)
/// / (high - low). What a GGUF file's rope_freqs tensor holds for such a
/// model; used to make test models.
std::vector<float> llama3RopeFreqFactors(int32_t rotaryDims, double theta,
                                         double factor, double lowFreqFactor,
                                         double highFreqFactor,
                                         double originalContext);

} // namespace kvir

#endif // KVIR_RUNTIME_CORE_MODELCONFIG_H
