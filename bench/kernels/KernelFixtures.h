//===- KernelFixtures.h - What the kernel benchmarks measure ----*- C++ -*-===//
//
// The cases both kv-bench-kernels (Google Benchmark) and the hardware report
// of `kv-bench --hw` (HardwareReport.cpp) time: a prefill through the
// generated CPU forward or the oracle, decode attention over 32768 tokens of
// a Llama-3-8B-like layer on f32, f16 or bf16 pages, and the generated matmul
// or OpenBLAS's cblas_sgemm (when built with libopenblas-dev; linked into the
// benchmarks only) on the synthetic model's weight shapes.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_BENCH_KERNELS_KERNELFIXTURES_H
#define KVIR_BENCH_KERNELS_KERNELFIXTURES_H

#include "bench/BenchModels.h"
#include "bench/BenchSupport.h"
#include "bench/DecodeLayer.h"
#include "driver/compiler/Compiler.h"
#include "runtime/core/ForwardCall.h"
#include "runtime/core/KVElement.h"
#include "runtime/core/KVParallel.h"
#include "runtime/core/KVRuntime.h"
#include "runtime/core/ModelConfig.h"
#include "runtime/core/ModelCost.h"
#include "runtime/cpu/CpuBackend.h"
#include "runtime/reference/Reference.h"

#include "benchmark/benchmark.h"
#ifdef KVIR_HAVE_OPENBLAS
#include <cblas.h>
#endif

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace kvir::bench::kernels {

inline void check(kvrt_status status) {
  if (status != KVRT_OK) {
    std::fprintf(stderr, "bench setup failed: %s\n", kvrt_last_error());
    std::abort();
  }
}

//===----------------------------------------------------------------------===//
// Prefill: generated vs oracle
//===----------------------------------------------------------------------===//

/// 0: stories260K (skipped if absent); 1: synthetic dim 512, hidden 1376,
/// 8 layers, 8 heads, 4 KV heads, vocab 4096.
inline kvrt_model *benchModel(int which) {
  static std::map<int, kvrt_model *> models;
  kvrt_model *&model = models[which];
  if (model)
    return model;
  if (which == 0) {
    if (!std::filesystem::exists(KVIR_TEST_MODEL))
      return nullptr;
    check(kvrt_model_load(KVIR_TEST_MODEL, &model));
  } else {
    kvrt_model_config c = syntheticConfig(512, 8, 4096, 2048);
    check(kvrt_model_synthetic(&c, 1, &model));
  }
  return model;
}

/// A prefill of `n` tokens from position 0 over an empty view of `model`,
/// all logits rows, through the generated forward or the oracle.
class PrefillCase {
public:
  PrefillCase(kvrt_model *model, int64_t n, bool generated)
      : model(model), n(n), generated(generated), tokens(n) {
    check(kvrt_model_get_config(model, &config));
    kvrt_pool_config pc;
    check(kvrt_pool_config_for_model(model, &pc));
    pc.capacity_pages = (n + 15) / 16 + 1;
    check(kvrt_pool_create(&pc, &pool));
    check(kvrt_view_create(pool, &empty));
    for (int64_t t = 0; t < n; ++t)
      tokens[t] = int32_t((t * 7919 + 13) % config.vocab_size);
    if (generated)
      check(kvir::compiler::compileForward(config, kvir::compiler::Target::Cpu,
                                           &forward));
  }
  ~PrefillCase() {
    kvrt_view_release(empty);
    kvrt_pool_release(pool);
  }

  kvrt_status run() {
    kvrt_view *out = nullptr;
    kvrt_status s =
        generated ? cpu->prefill(forward, model, empty, tokens.data(), n, 0,
                                 nullptr, kvir::LogitRows::all(), &logits, &out)
                  : kvir::reference::prefill(model, empty, tokens.data(), n, 0,
                                             nullptr, &logits, &out);
    kvrt_view_release(out);
    benchmark::DoNotOptimize(logits.data());
    return s;
  }

  /// Model FLOPs of one run (DESIGN's formula, every logits row).
  double flops() const {
    kvir::ModelCost cost = kvir::ModelCost::of(config);
    return double(cost.rangeFlops(0, n) + cost.logitsFlops(n));
  }

  kvrt_model_config config;

private:
  kvrt_model *model;
  int64_t n;
  bool generated;
  std::vector<int32_t> tokens;
  kvrt_pool *pool = nullptr;
  kvrt_view *empty = nullptr;
  std::unique_ptr<kvir::ComputeBackend> cpu = kvir::cpu::createCpuBackend();
  kvir::Forward forward;
  std::vector<float> logits;
};

//===----------------------------------------------------------------------===//
// Decode attention
//===----------------------------------------------------------------------===//

/// kContext tokens of pseudo-random K/V (as bench/AttentionBench.cpp) on
/// pages of one element type, the generated forward of the layer config for
/// them, and run tables cutting the context into runs with different
/// offsets. The pool has room for a second copy, the pages a materialized
/// rewrite writes.
class AttentionFixture {
public:
  static AttentionFixture &get(kvrt_kv_dtype dtype = KVRT_KV_F32) {
    static std::map<kvrt_kv_dtype, std::unique_ptr<AttentionFixture>> fixtures;
    std::unique_ptr<AttentionFixture> &fixture = fixtures[dtype];
    if (!fixture)
      fixture.reset(new AttentionFixture(dtype));
    return *fixture;
  }

  kvir::Forward forward;
  kvrt_page_layout layout;
  kvrt_pool *pool = nullptr;
  std::vector<int32_t> pages, targetPages;

  /// The context as `runs` runs of equal length, each with an offset that
  /// varies per run (0 for a single run).
  kvir::RunTable &table(int64_t runs) {
    auto it = tables.find(runs);
    if (it != tables.end())
      return it->second;
    kvir::RunTable &t = tables[runs];
    int64_t length = kContext / runs;
    for (int64_t r = 0; r < runs; ++r)
      t.append(pages.data() + r * length / kPageTokens,
               (length + kPageTokens - 1) / kPageTokens, 0, length, r * length,
               runs == 1 ? 0 : (r % 5) * 3 - 6);
    return t;
  }

  /// The generated attention of one query after the context over `table`.
  void attention(kvir::RunTable &table, std::vector<float> &q,
                 std::vector<float> &out) {
    kvrt_attention_args args{};
    args.q = kvir::memrefF32(q.data(), int64_t(q.size()));
    args.kv =
        kvir::memrefKV(layout.base, layout.capacity_pages * layout.page_stride);
    args.pages = table.pagesRef();
    args.runs = table.rowsRef();
    args.tiles = kvir::memrefTable(nullptr, 0, KVRT_TILE_WIDTH);
    args.part = kvir::memrefF32(nullptr, 0);
    args.out = kvir::memrefF32(out.data(), int64_t(out.size()));
    args.page_tokens = kPageTokens;
    args.pos = kContext + 16;
    args.n = 1;
    args.layer = 0;
    forward.attention(&args);
    benchmark::DoNotOptimize(out.data());
  }

private:
  explicit AttentionFixture(kvrt_kv_dtype dtype) {
    check(kvir::compiler::compileForward(
        layerConfig(), kvir::compiler::Target::Cpu, &forward, dtype));
    kvrt_pool_config config{
        1, kKvHeads, kHeadSize, kPageTokens, 2 * kContext / kPageTokens, dtype};
    check(kvrt_pool_create(&config, &pool));
    check(kvrt_pool_get_layout(pool, &layout));
    pages.resize(kContext / kPageTokens);
    targetPages.resize(pages.size());
    check(kvrt_pool_alloc_pages(pool, pages.size(), pages.data()));
    check(kvrt_pool_alloc_pages(pool, targetPages.size(), targetPages.data()));
    uint64_t state = 1;
    for (int32_t page : pages)
      for (int64_t i = 0; i < layout.page_stride; ++i) {
        kvrt::storeElement(layout.base, page * layout.page_stride + i, dtype,
                           nextKVElement(state));
      }
    // Touch the target pages so that page faults stay out of the timings.
    for (int32_t page : targetPages)
      for (int64_t i = 0; i < layout.page_stride; i += 1024)
        kvrt::storeElement(layout.base, page * layout.page_stride + i, dtype,
                           1.0f);
  }

  std::map<int64_t, kvir::RunTable> tables;
};

/// Generated decode attention of one token over the context cut in `runs`,
/// on pages of f32 (dtype 0), f16 (1) or bf16 (2).
//===----------------------------------------------------------------------===//
// The matmul alone: generated vs OpenBLAS, and the FMA peak beside them
//===----------------------------------------------------------------------===//

/// The weight shapes (outputs x inputs) of the dim-512 synthetic model:
/// wq/wo, wk/wv, w1/w3, w2 and the classifier.
constexpr int64_t kShapes[][2] = {
    {512, 512}, {256, 512}, {1376, 512}, {512, 1376}, {4096, 512}};

/// c = a · bᵀ for 256 tokens of one weight shape (m outputs x k inputs),
/// through the generated matmul or cblas_sgemm.
class MatmulCase {
public:
  static constexpr int64_t kTokens = 256;

  MatmulCase(int64_t m, int64_t k)
      : m(m), k(k), a(kTokens * k), b(m * k), c(kTokens * m) {
    for (size_t i = 0; i < a.size(); ++i)
      a[i] = float(int(i * 7 % 13) - 6) * 0.05f;
    for (size_t i = 0; i < b.size(); ++i)
      b[i] = float(int(i * 5 % 11) - 5) * 0.03f;
    check(kvir::compiler::compileMatmul(m, k, &fn));
    ma = kvir::memrefF32(a.data(), int64_t(a.size()));
    mb = {b.data(), b.data(), 0, {int64_t(b.size() * sizeof(float))}, {1}};
    mc = kvir::memrefF32(c.data(), int64_t(c.size()));
  }

  /// One product; false where `blas` is asked for and OpenBLAS is absent.
  bool run(bool blas) {
    if (!blas) {
      fn(&ma, &mb, &mc, kTokens);
    } else {
#ifdef KVIR_HAVE_OPENBLAS
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(kTokens), int(m),
                  int(k), 1.0f, a.data(), int(k), b.data(), int(k), 0.0f,
                  c.data(), int(m));
#else
      return false;
#endif
    }
    benchmark::DoNotOptimize(c.data());
    return true;
  }

  double flops() const { return 2.0 * double(kTokens * m * k); }

  /// Both libraries on `threads` threads.
  static void setThreads(int threads) {
    kvrt_set_num_threads(threads);
#ifdef KVIR_HAVE_OPENBLAS
    openblas_set_num_threads(threads);
#endif
  }

private:
  int64_t m, k;
  std::vector<float> a, b, c;
  kvir::compiler::MatmulFn fn = nullptr;
  kvrt_memref_f32 ma, mc;
  kvrt_memref_weight mb;
};

/// The matmul of shape `shape` through the generated code (0) or OpenBLAS
/// (1) on `threads` threads; reports FLOP/s.
} // namespace kvir::bench::kernels

#endif // KVIR_BENCH_KERNELS_KERNELFIXTURES_H
