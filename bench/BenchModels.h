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
#include "runtime/core/Model.h"

#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <string>

namespace kvir::bench {

/// The benchmarks' synthetic shape of width `dim`: 8 heads over 4 KV heads
/// and the FFN width of llama's rule, 8/3 dim rounded to a multiple of 32
/// (1376 for dim 512).
inline kvrt_model_config syntheticConfig(int32_t dim, int32_t layers,
                                         int32_t vocab, int32_t seqLen) {
  return kvrt::sizedConfig(dim, dim * 8 / 3 / 32 * 32 + 32, layers, 8, 4, vocab,
                           seqLen);
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
