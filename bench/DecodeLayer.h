//===- DecodeLayer.h - The benchmarks' decode-attention layer ---*- C++ -*-===//
//
// One layer of a Llama-3-8B-like model (32 query heads, 8 KV heads of 128,
// half RoPE) and a 32768-token context of pseudo-random K/V: the workload
// both the oracle's attention benchmark (AttentionBench.cpp) and the
// generated kernels' (kernels/KernelFixtures.h) time. On f32 pages the K/V
// is 256 MiB, far beyond the last-level cache.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_BENCH_DECODELAYER_H
#define KVIR_BENCH_DECODELAYER_H

#include "runtime/core/KVRuntime.h"
#include "runtime/core/ModelConfig.h"

#include <cstdint>

namespace kvir::bench {

constexpr int32_t kHeads = 32, kKvHeads = 8, kHeadSize = 128;
constexpr int64_t kContext = 32768;
constexpr int32_t kPageTokens = 16;

/// The K/V bytes of the context on pages of `dtype`.
inline int64_t kvBytes(kvrt_kv_dtype dtype) {
  return kContext * kKvHeads * kHeadSize * 2 * kvir::kvDtypeBytes(dtype);
}

inline kvrt_model_config layerConfig() {
  kvrt_model_config c;
  kvrt_model_config_init(&c);
  c.dim = kHeads * kHeadSize;
  c.hidden_dim = 4 * c.dim;
  c.n_layers = 1;
  c.n_heads = kHeads;
  c.n_kv_heads = kKvHeads;
  c.vocab_size = 32;
  c.rope_layout = KVRT_ROPE_HALF;
  c.rope_theta = 500000.0;
  return c;
}

/// The next element of the pseudo-random K/V, in [-1, 1), from `state`
/// (start at 1): the same sequence for every benchmark.
inline float nextKVElement(uint64_t &state) {
  state = state * 6364136223846793005ULL + 1442695040888963407ULL;
  return static_cast<float>(int32_t(state >> 40) - (1 << 23)) * 0x1.0p-23f;
}

} // namespace kvir::bench

#endif // KVIR_BENCH_DECODELAYER_H
