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

#include "llvm/Support/CommandLine.h"
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

/// The options of a benchmark that runs on stories260K and on a synthetic
/// model: --stories FILE ('' skips it) and --skip-synthetic.
struct ModelOptions {
  llvm::cl::opt<std::string> stories;
  llvm::cl::opt<bool> skipSynthetic;

  /// `storiesDefault`: the checkpoint used by default; `skipDescription`:
  /// what --skip-synthetic skips (both literals).
  ModelOptions(llvm::cl::OptionCategory &category, const char *storiesDefault,
               const char *skipDescription)
      : stories("stories", llvm::cl::desc("stories260K checkpoint ('' skips)"),
                llvm::cl::init(storiesDefault), llvm::cl::cat(category)),
        skipSynthetic("skip-synthetic", llvm::cl::desc(skipDescription),
                      llvm::cl::init(false), llvm::cl::cat(category)) {}

  /// `bench(model, "stories260K")` on the --stories checkpoint: true when
  /// --stories is '' or the file does not load (a line says it is skipped
  /// and why), else what `bench` returns.
  template <typename Bench> bool onStories(Bench bench) const {
    if (stories.empty())
      return true;
    kvrt_model *model = nullptr;
    if (kvrt_model_load(stories.c_str(), &model) != KVRT_OK) {
      llvm::outs() << "\n== stories260K skipped: " << kvrt_last_error() << "\n";
      return true;
    }
    bool ok = bench(model, "stories260K");
    kvrt_model_release(model);
    return ok;
  }
};

} // namespace kvir::bench

#endif // KVIR_BENCH_BENCHMODELS_H
