//===- BenchModels.h - The models the benchmarks run on ---------*- C++ -*-===//
//
// What kv-bench, kv-bench-store and the kernel benchmarks share about their
// models: the synthetic shape of realistic size they time, and stories260K,
// loaded where it is found and reported as skipped where not.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_BENCH_BENCHMODELS_H
#define KVIR_BENCH_BENCHMODELS_H

#include "runtime/core/KVRuntime.h"

#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <string>

namespace kvir::bench {

/// The benchmarks' synthetic shape of width `dim`: 8 heads over 4 KV heads
/// and the FFN width of llama's rule, 8/3 dim rounded to a multiple of 32
/// (1376 for dim 512).
inline kvrt_model_config syntheticConfig(int32_t dim, int32_t layers,
                                         int32_t vocab, int32_t seqLen) {
  kvrt_model_config c;
  kvrt_model_config_init(&c);
  c.dim = dim;
  c.hidden_dim = dim * 8 / 3 / 32 * 32 + 32;
  c.n_layers = layers;
  c.n_heads = 8;
  c.n_kv_heads = 4;
  c.vocab_size = vocab;
  c.seq_len = seqLen;
  return c;
}

/// The model file at `path` (stories260K), or null after a line saying that
/// the benchmark of `name` is skipped and why.
inline kvrt_model *loadOrSkip(const std::string &path, const char *name) {
  kvrt_model *model = nullptr;
  if (kvrt_model_load(path.c_str(), &model) == KVRT_OK)
    return model;
  llvm::outs() << "\n== " << name << " skipped: " << kvrt_last_error() << "\n";
  return nullptr;
}

} // namespace kvir::bench

#endif // KVIR_BENCH_BENCHMODELS_H
