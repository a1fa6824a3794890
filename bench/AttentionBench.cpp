//===- AttentionBench.cpp - Oracle attention vs bandwidth -------*- C++ -*-===//
//
// Baselines for the generated kernels: the reference oracle's decode
// attention over a view of one run and of many runs with different offsets,
// and the machine's single-core read bandwidth, side by side. The K/V working
// set is 256 MiB, far beyond the last-level cache.
//
//===----------------------------------------------------------------------===//

#include "bench/BenchSupport.h"
#include "bench/DecodeLayer.h"
#include "runtime/core/KVRuntime.h"
#include "runtime/reference/Reference.h"

#include "benchmark/benchmark.h"

#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <vector>

using kvir::reference::ShiftMode;
using namespace kvir::bench;

namespace {

/// A pool filled with kContext tokens of pseudo-random sealed K/V, and views
/// of it cut into runs.
class Fixture {
public:
  static Fixture &get() {
    static Fixture fixture;
    return fixture;
  }

  /// The whole context as `runs` runs of equal length, each with its own
  /// offset (cached).
  const kvrt_view *view(int64_t runs) {
    std::unique_ptr<kvrt_view, void (*)(kvrt_view *)> &slot =
        views.try_emplace(runs, nullptr, kvrt_view_release).first->second;
    if (!slot)
      slot.reset(build(runs));
    return slot.get();
  }

  ~Fixture() {
    views.clear();
    for (int32_t page : pages)
      kvrt_pool_release_page(pool, page);
    kvrt_pool_release(pool);
  }

private:
  Fixture() {
    kvrt_pool_config config{
        1,          kKvHeads, kHeadSize, kPageTokens, kContext / kPageTokens,
        KVRT_KV_F32};
    check(kvrt_pool_create(&config, &pool));
    pages.resize(config.capacity_pages);
    check(kvrt_pool_alloc_pages(pool, pages.size(), pages.data()));
    uint64_t state = 1;
    for (int32_t page : pages) {
      float *data = nullptr;
      check(kvrt_pool_page_data(pool, page, &data));
      kvrt_page_layout layout;
      check(kvrt_pool_get_layout(pool, &layout));
      for (int64_t i = 0; i < layout.page_stride; ++i) {
        data[i] = kvir::bench::nextKVElement(state);
      }
      check(kvrt_pool_seal_page(pool, page));
    }
    tokens.assign(kContext, 1);
  }

  static void check(kvrt_status status) {
    if (status != KVRT_OK) {
      std::fprintf(stderr, "bench setup failed: %s\n", kvrt_last_error());
      std::abort();
    }
  }

  kvrt_view *build(int64_t runs) {
    kvrt_view *view = nullptr;
    check(kvrt_view_create(pool, &view));
    int64_t length = kContext / runs;
    for (int64_t r = 0; r < runs; ++r) {
      // Offsets vary per run (as after edits and compositions) and keep
      // every key at or before the query.
      kvrt_run run{pages.data() + r * length / kPageTokens,
                   (length + kPageTokens - 1) / kPageTokens,
                   0,
                   length,
                   r * length,
                   (r % 5) * 3 - 6,
                   tokens.data() + r * length,
                   nullptr};
      kvrt_view *next = nullptr;
      check(kvrt_view_append(view, &run, &next));
      kvrt_view_release(view);
      view = next;
    }
    return view;
  }

  kvrt_pool *pool = nullptr;
  std::vector<int32_t> pages;
  std::vector<int32_t> tokens;
  std::map<int64_t, std::unique_ptr<kvrt_view, void (*)(kvrt_view *)>> views;
};

/// Decode attention of one token at position kContext + 16 over the view;
/// bytes are the distinct K/V bytes of the context.
void BM_OracleDecodeAttention(benchmark::State &state) {
  int64_t runs = state.range(0);
  ShiftMode mode = state.range(1) ? ShiftMode::Materialized : ShiftMode::Fused;
  kvrt_model_config config = layerConfig();
  const kvrt_view *view = Fixture::get().view(runs);
  std::vector<double> q(config.dim, 0.01), out(config.dim);
  for (auto _ : state) {
    if (kvir::reference::attention(config, view, 0, q.data(), kContext + 16,
                                   mode, out.data()) != KVRT_OK)
      state.SkipWithError(kvrt_last_error());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * kvBytes(KVRT_KV_F32));
  state.SetLabel(mode == ShiftMode::Fused ? "fused" : "materialized");
}
BENCHMARK(BM_OracleDecodeAttention)
    ->ArgNames({"runs", "materialized"})
    ->Args({1, 0})
    ->Args({16, 0})
    ->Args({256, 0})
    ->Args({2048, 0})
    ->Args({16, 1})
    ->Unit(benchmark::kMillisecond);

void BM_ReadBandwidth(benchmark::State &state) {
  kvir::bench::measureReadBandwidth(state);
}
BENCHMARK(BM_ReadBandwidth)->Unit(benchmark::kMillisecond);

} // namespace

BENCHMARK_MAIN();
