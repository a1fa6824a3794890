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
// the enum is exhaustive, so the compiler points at each place.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_CORE_MODELCONFIG_H
#define KVIR_RUNTIME_CORE_MODELCONFIG_H

#include "runtime/core/KVRuntime.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace kvir {

/// The spelling of a RoPE layout in IR, keys and messages.
const char *ropeLayoutName(kvrt_rope_layout layout);
std::optional<kvrt_rope_layout> parseRopeLayout(std::string_view name);

/// The spelling of a K/V element type (`f32`, `f16`, `bf16`).
const char *kvDtypeName(kvrt_kv_dtype dtype);
std::optional<kvrt_kv_dtype> parseKvDtype(std::string_view name);
/// Bytes of one element.
int64_t kvDtypeBytes(kvrt_kv_dtype dtype);
/// The K/V element type a config key (configKey) names; f32 for a null key
/// or one without "kv=".
std::optional<kvrt_kv_dtype> kvDtypeOfKey(const char *key);

/// The dimensions of a head that RoPE pair `i` (0 <= i < headSize / 2)
/// rotates together.
inline std::pair<int32_t, int32_t> ropePair(kvrt_rope_layout layout,
                                            int32_t headSize, int32_t i) {
  switch (layout) {
  case KVRT_ROPE_INTERLEAVED:
    return {2 * i, 2 * i + 1};
  case KVRT_ROPE_HALF:
    return {i, i + headSize / 2};
  }
  return {0, 0}; // unreachable: the switch is exhaustive
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

/// The prefix of the generated functions of one config in a module:
/// `kv_fwd_` and 16 hex digits of a hash of configKey().
std::string forwardPrefix(const kvrt_model_config &config, kvrt_kv_dtype dtype);

/// Derived sizes.
inline int32_t headSize(const kvrt_model_config &c) {
  return c.dim / c.n_heads;
}
inline int32_t kvDim(const kvrt_model_config &c) {
  return c.n_kv_heads * headSize(c);
}

} // namespace kvir

#endif // KVIR_RUNTIME_CORE_MODELCONFIG_H
