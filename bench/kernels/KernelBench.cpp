//===- KernelBench.cpp - Generated CPU kernels vs baselines -----*- C++ -*-===//
//
// Side by side, in one run (the generated forward JIT-compiled by the
// compiler driver, as kv-run compiles it into a program's module):
//  - prefill through the generated CPU backend vs the reference oracle
//    (tokens/s), on stories260K and on a synthetic model of realistic shape;
//  - generated decode attention (one query over 32768 tokens of a
//    Llama-3-8B-like layer: 32 query heads, 8 KV heads of 128, half RoPE,
//    f32 K/V = 256 MiB) in bytes/s, next to the single-core read bandwidth
//    (with --hw also on f16 and bf16 pages, 128 MiB, in tokens/s against f32);
//  - that attention over 1 unshifted run, 16 and 256 shifted runs, and the
//    materialized alternative (the generated key rewrite, then 1 run);
//  - the generated matmul alone vs OpenBLAS's cblas_sgemm (when built with
//    libopenblas-dev; linked into this benchmark only) and the FMA peak.
// `kv-bench-kernels --hw [TOKENS]` prints instead, in one run, the machine's
// single-core FMA peak and read bandwidth and, as fractions of them,
// prefill of TOKENS (default 256) on 1 and 2 threads, the matmul vs
// OpenBLAS on the model's shapes and decode attention (docs/cpu-backend.md).
//
//===----------------------------------------------------------------------===//

#include "bench/BenchSupport.h"
#include "runtime/core/ForwardCall.h"
#include "runtime/core/KVElement.h"
#include "runtime/core/KVParallel.h"
#include "runtime/core/KVRuntime.h"
#include "runtime/core/ModelConfig.h"
#include "runtime/core/ModelCost.h"
#include "runtime/cpu/CpuBackend.h"
#include "runtime/reference/Reference.h"
#include "tools/compiler/Compiler.h"

#include "benchmark/benchmark.h"
#ifdef KVIR_HAVE_OPENBLAS
#include <cblas.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace {

void check(kvrt_status status) {
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
kvrt_model *benchModel(int which) {
  static std::map<int, kvrt_model *> models;
  kvrt_model *&model = models[which];
  if (model)
    return model;
  if (which == 0) {
    if (!std::filesystem::exists(KVIR_TEST_MODEL))
      return nullptr;
    check(kvrt_model_load(KVIR_TEST_MODEL, &model));
  } else {
    kvrt_model_config c;
    kvrt_model_config_init(&c);
    c.dim = 512;
    c.hidden_dim = 1376;
    c.n_layers = 8;
    c.n_heads = 8;
    c.n_kv_heads = 4;
    c.vocab_size = 4096;
    c.seq_len = 2048;
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
                                 nullptr, false, &logits, &out)
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

void BM_Prefill(benchmark::State &state) {
  bool generated = state.range(0) == 1;
  kvrt_model *model = benchModel(int(state.range(1)));
  int64_t n = state.range(2);
  if (!model) {
    state.SkipWithError("stories260K not found (KVIR_TEST_MODEL)");
    return;
  }
  PrefillCase prefill(model, n, generated);
  for (auto _ : state)
    if (prefill.run() != KVRT_OK) {
      state.SkipWithError(kvrt_last_error());
      break;
    }
  state.counters["tokens_per_s"] = benchmark::Counter(
      double(state.iterations() * n), benchmark::Counter::kIsRate);
  state.SetLabel(std::string(generated ? "generated" : "oracle") +
                 (state.range(1) == 0 ? ", stories260K" : ", dim 512 x 8"));
}
BENCHMARK(BM_Prefill)
    ->ArgNames({"generated", "model", "tokens"})
    ->Args({1, 0, 256})
    ->Args({0, 0, 256})
    ->Args({1, 1, 64})
    ->Args({0, 1, 64})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

//===----------------------------------------------------------------------===//
// Decode attention
//===----------------------------------------------------------------------===//

constexpr int32_t kHeads = 32, kKvHeads = 8, kHeadSize = 128;
constexpr int64_t kContext = 32768;
constexpr int32_t kPageTokens = 16;
/// The K/V bytes of the context on pages of `dtype`.
int64_t kvBytes(kvrt_kv_dtype dtype) {
  return kContext * kKvHeads * kHeadSize * 2 * kvir::kvDtypeBytes(dtype);
}
constexpr int64_t kKVBytes =
    kContext * kKvHeads * kHeadSize * 2 * int64_t(sizeof(float));

kvrt_model_config layerConfig() {
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
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        kvrt::storeElement(
            layout.base, page * layout.page_stride + i, dtype,
            static_cast<float>(int32_t(state >> 40) - (1 << 23)) * 0x1.0p-23f);
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
void BM_GeneratedDecodeAttention(benchmark::State &state) {
  const kvrt_kv_dtype dtypes[3] = {KVRT_KV_F32, KVRT_KV_F16, KVRT_KV_BF16};
  kvrt_kv_dtype dtype = dtypes[state.range(1)];
  AttentionFixture &f = AttentionFixture::get(dtype);
  kvir::RunTable &table = f.table(state.range(0));
  std::vector<float> q(kHeads * kHeadSize, 0.01f), out(q.size());
  for (auto _ : state)
    f.attention(table, q, out);
  state.SetBytesProcessed(state.iterations() * kvBytes(dtype));
  state.SetLabel(std::string("fused, ") + kvir::kvDtypeName(dtype));
}
BENCHMARK(BM_GeneratedDecodeAttention)
    ->ArgNames({"runs", "dtype"})
    ->Args({1, 0})
    ->Args({16, 0})
    ->Args({256, 0})
    ->Args({2048, 0})
    ->Args({1, 1})
    ->Args({1, 2})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

/// The materialized alternative for 16 shifted runs: the generated
/// materialize rewrites every key rotated by its run's Δ into fresh pages,
/// then one unshifted run is attended.
void BM_GeneratedDecodeAttentionMaterialized(benchmark::State &state) {
  AttentionFixture &f = AttentionFixture::get();
  kvir::RunTable &table = f.table(16);
  kvir::RunTable materialized;
  materialized.append(f.targetPages.data(), f.targetPages.size(), 0, kContext,
                      0, 0);
  std::vector<float> q(kHeads * kHeadSize, 0.01f), out(q.size());
  for (auto _ : state) {
    kvrt_materialize_args args{};
    args.kv = kvir::memrefKV(f.layout.base,
                             f.layout.capacity_pages * f.layout.page_stride);
    args.pages = table.pagesRef();
    args.runs = table.rowsRef();
    args.dst_pages =
        kvir::memrefI32(f.targetPages.data(), int64_t(f.targetPages.size()));
    args.page_tokens = kPageTokens;
    f.forward.materialize(&args);
    f.attention(materialized, q, out);
  }
  state.SetBytesProcessed(state.iterations() * kKVBytes);
  state.SetLabel("materialized (rewrite keys, then 1 run)");
}
BENCHMARK(BM_GeneratedDecodeAttentionMaterialized)
    ->ArgName("runs")
    ->Arg(16)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

//===----------------------------------------------------------------------===//
// The matmul alone: generated vs OpenBLAS, and the FMA peak beside them
//===----------------------------------------------------------------------===//

/// The weight shapes (outputs x inputs) of the dim-512 synthetic model:
/// wq/wo, wk/wv, w1/w3, w2 and the classifier.
constexpr int64_t kShapes[][2] = {
    {512, 512}, {256, 512}, {1376, 512}, {512, 1376}, {4096, 512}};

void BM_FmaPeak(benchmark::State &state) { kvir::bench::measureFmaPeak(state); }
BENCHMARK(BM_FmaPeak)->Unit(benchmark::kMillisecond)->UseRealTime();

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
    mb = kvir::memrefF32(b.data(), int64_t(b.size()));
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
  kvrt_memref_f32 ma, mb, mc;
};

/// The matmul of shape `shape` through the generated code (0) or OpenBLAS
/// (1) on `threads` threads; reports FLOP/s.
void BM_Matmul(benchmark::State &state) {
  bool blas = state.range(0) == 1;
  int64_t m = kShapes[state.range(1)][0], k = kShapes[state.range(1)][1];
  MatmulCase matmul(m, k);
  MatmulCase::setThreads(int(state.range(2)));
  for (auto _ : state)
    if (!matmul.run(blas)) {
      state.SkipWithError("built without OpenBLAS (libopenblas-dev)");
      break;
    }
  MatmulCase::setThreads(0);
  state.counters["flops"] = benchmark::Counter(
      double(state.iterations()) * matmul.flops(), benchmark::Counter::kIsRate);
  state.SetLabel(std::string(blas ? "openblas" : "generated") + " " +
                 std::to_string(m) + "x" + std::to_string(k));
}
BENCHMARK(BM_Matmul)
    ->ArgNames({"blas", "shape", "threads"})
    ->ArgsProduct({{0, 1}, {0, 1, 2, 3, 4}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_ReadBandwidth(benchmark::State &state) {
  kvir::bench::measureReadBandwidth(state);
}
BENCHMARK(BM_ReadBandwidth)->Unit(benchmark::kMillisecond)->UseRealTime();

//===----------------------------------------------------------------------===//
// --hw: every figure against the machine's limits, side by side
//===----------------------------------------------------------------------===//

constexpr int kRepeats = 5;

/// One streaming read of `buffer` (as kvir::bench::readAll) by the
/// runtime's parallel loop on its current threads, in disjoint chunks.
void readInParallel(const kvir::bench::ReadBuffer &buffer) {
  constexpr int64_t kChunks = 64;
  struct Job {
    const uint64_t *data;
    size_t words;
    uint64_t sums[kChunks];
  } job{buffer.data(), buffer.size(), {}};
  kvrt_parallel_for(
      kChunks,
      [](void *context, int64_t begin, int64_t end) {
        Job &j = *static_cast<Job *>(context);
        for (int64_t c = begin; c < end; ++c) {
          uint64_t sum = 0;
          for (size_t i = j.words * c / kChunks,
                      e = j.words * (c + 1) / kChunks;
               i < e; ++i)
            sum += j.data[i];
          j.sums[c] = sum;
        }
      },
      &job);
  benchmark::DoNotOptimize(job.sums);
}

/// Prints this machine's single-core FMA peak and read bandwidth, then
/// prefill, the matmul alone and decode attention as fractions of them, in
/// one run. On a machine shared with other work every figure is the best of
/// kRepeats rounds, and what is compared is measured in alternating rounds
/// (1 and 2 threads, generated and OpenBLAS, bandwidth and attention) so
/// that both sides see the same disturbance; the peak is sampled between
/// the sections and its best is the one divided by.
int hardwareReport(int64_t prefillTokens) {
  using kvir::bench::bestSeconds;
  // Short samples (about 3 ms each), many of them: on a busy machine a
  // short one is likelier to run undisturbed, as a matmul's run does.
  constexpr int64_t kPeakIterations = int64_t(1) << 20;
  double peak = 0;
  auto samplePeak = [&] {
    double flops = 0;
    double seconds = bestSeconds(4 * kRepeats, [&] {
      flops = kvir::bench::runFmaPeak(kPeakIterations);
    });
    peak = std::max(peak, flops / seconds);
  };
  samplePeak();

  // Decode attention of one query is parallel over KV heads: on 1 thread
  // it is compared with one core's read bandwidth, on every thread with the
  // bandwidth of as many threads reading disjoint parts of the buffer (one
  // parallel loop of the runtime's pool, as the attention's).
  kvrt_set_num_threads(0);
  const int allThreads = kvrt_get_num_threads();
  std::vector<int> threadCounts = {1};
  if (allThreads > 1)
    threadCounts.push_back(allThreads);
  kvir::bench::ReadBuffer buffer = kvir::bench::readBandwidthBuffer();
  AttentionFixture &f = AttentionFixture::get();
  kvir::RunTable &table = f.table(1);
  std::vector<float> q(kHeads * kHeadSize, 0.01f), out(q.size());
  // f16 and bf16 pages beside f32, in the same rounds.
  const kvrt_kv_dtype dtypes[3] = {KVRT_KV_F32, KVRT_KV_F16, KVRT_KV_BF16};
  AttentionFixture *fixtures[3] = {&f, &AttentionFixture::get(dtypes[1]),
                                   &AttentionFixture::get(dtypes[2])};
  kvir::RunTable *tables[3] = {&table, &fixtures[1]->table(1),
                               &fixtures[2]->table(1)};
  struct DecodeRow {
    int threads;
    double readSeconds = 1e300;
    double seconds[3] = {1e300, 1e300, 1e300};
  };
  std::vector<DecodeRow> decode;
  for (int threads : threadCounts)
    decode.push_back({threads});
  for (DecodeRow &row : decode) {
    kvrt_set_num_threads(row.threads);
    readInParallel(buffer);
    for (int i = 0; i < 3; ++i)
      fixtures[i]->attention(*tables[i], q, out);
  }
  for (int r = 0; r < kRepeats; ++r)
    for (DecodeRow &row : decode) {
      kvrt_set_num_threads(row.threads);
      row.readSeconds = std::min(
          row.readSeconds, bestSeconds(1, [&] { readInParallel(buffer); }));
      for (int i = 0; i < 3; ++i)
        row.seconds[i] = std::min(row.seconds[i], bestSeconds(1, [&] {
                                    fixtures[i]->attention(*tables[i], q, out);
                                  }));
    }
  kvrt_set_num_threads(0);
  double bandwidth =
      double(buffer.size() * sizeof(uint64_t)) / decode.front().readSeconds;
  samplePeak();

  kvrt_model *model = benchModel(1);
  PrefillCase prefill(model, prefillTokens, /*generated=*/true);
  double prefillSeconds[3] = {1e300, 1e300, 1e300};
  for (int threads : {1, 2}) {
    kvrt_set_num_threads(threads);
    check(prefill.run());
  }
  for (int r = 0; r < kRepeats; ++r)
    for (int threads : {1, 2}) {
      kvrt_set_num_threads(threads);
      prefillSeconds[threads] =
          std::min(prefillSeconds[threads],
                   bestSeconds(1, [&] { check(prefill.run()); }));
    }
  kvrt_set_num_threads(0);
  samplePeak();

  struct MatmulRow {
    int64_t m, k;
    double generated, blas;
  };
  std::vector<MatmulRow> matmuls;
  MatmulCase::setThreads(1);
  for (const auto &shape : kShapes) {
    MatmulCase matmul(shape[0], shape[1]);
    bool haveBlas = matmul.run(true);
    matmul.run(false);
    double generated = 1e300, blas = 1e300;
    for (int r = 0; r < kRepeats; ++r) {
      generated =
          std::min(generated, bestSeconds(1, [&] { matmul.run(false); }));
      if (haveBlas)
        blas = std::min(blas, bestSeconds(1, [&] { matmul.run(true); }));
    }
    matmuls.push_back({shape[0], shape[1], matmul.flops() / generated,
                       haveBlas ? matmul.flops() / blas : 0.0});
    samplePeak();
  }
  MatmulCase::setThreads(0);

  std::printf("== machine (best of %d rounds each; a shared machine lowers "
              "every figure)\n",
              kRepeats);
  std::printf("fp32 FMA peak, 1 core (%s, 12 chains)  %8.1f GFLOP/s\n",
              __builtin_cpu_supports("avx512f") ? "AVX-512" : "AVX2",
              peak * 1e-9);
  std::printf("read bandwidth, 1 core (256 MiB)       %8.2f GB/s\n",
              bandwidth * 1e-9);

  std::printf("\n== prefill: %lld tokens, synthetic dim %d, hidden %d, %d "
              "layers, heads %d/%d, vocab %d (model FLOPs, all logits)\n",
              (long long)prefillTokens, prefill.config.dim,
              prefill.config.hidden_dim, prefill.config.n_layers,
              prefill.config.n_heads, prefill.config.n_kv_heads,
              prefill.config.vocab_size);
  for (int threads : {1, 2}) {
    double seconds = prefillSeconds[threads];
    double rate = prefill.flops() / seconds;
    std::printf("%d thread%s  %8.1f ms  %8.1f tokens/s  %7.1f GFLOP/s  "
                "%5.2f of 1-core peak\n",
                threads, threads == 1 ? " " : "s", seconds * 1e3,
                double(prefillTokens) / seconds, rate * 1e-9, rate / peak);
  }
  std::printf("2 threads / 1 thread: %.2fx\n",
              prefillSeconds[1] / prefillSeconds[2]);

  std::printf("\n== matmul alone: c = a * b^T, %lld tokens, 1 thread\n",
              (long long)MatmulCase::kTokens);
  for (const MatmulRow &row : matmuls) {
    std::printf("%5lld x %-5lld  generated %7.1f GFLOP/s (%4.2f of peak)",
                (long long)row.m, (long long)row.k, row.generated * 1e-9,
                row.generated / peak);
    if (row.blas > 0)
      std::printf("  OpenBLAS %7.1f GFLOP/s  generated/OpenBLAS %4.2fx\n",
                  row.blas * 1e-9, row.generated / row.blas);
    else
      std::printf("  OpenBLAS: skipped, built without libopenblas-dev\n");
  }

  std::printf("\n== decode attention: 1 query, %lld tokens, %d/%d heads of "
              "%d (K/V %lld MiB on f32 pages, %lld MiB on f16/bf16), "
              "parallel over KV heads\n",
              (long long)kContext, kHeads, kKvHeads, kHeadSize,
              (long long)(kKVBytes >> 20),
              (long long)(kvBytes(KVRT_KV_F16) >> 20));
  for (const DecodeRow &row : decode) {
    double rowBandwidth =
        double(buffer.size() * sizeof(uint64_t)) / row.readSeconds;
    std::printf("%d thread%s: read bandwidth %.2f GB/s\n", row.threads,
                row.threads == 1 ? "" : "s", rowBandwidth * 1e-9);
    for (int i = 0; i < 3; ++i) {
      double bytes = double(kvBytes(dtypes[i])) / row.seconds[i];
      std::printf("  %-5s pages %8.2f ms  %8.2f GB/s  %5.2f of read "
                  "bandwidth  %8.1f tokens/s",
                  kvir::kvDtypeName(dtypes[i]), row.seconds[i] * 1e3,
                  bytes * 1e-9, bytes / rowBandwidth, 1.0 / row.seconds[i]);
      if (i > 0)
        std::printf("  %4.2fx the tokens/s of f32 pages",
                    row.seconds[0] / row.seconds[i]);
      std::printf("\n");
    }
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  if (argc >= 2 && std::string(argv[1]) == "--hw") {
    int64_t tokens = 256;
    if (argc == 3) {
      char *end = nullptr;
      tokens = std::strtoll(argv[2], &end, 10);
      if (*end || tokens < 1 || tokens > 2047) {
        std::fprintf(stderr,
                     "kv-bench-kernels: --hw TOKENS: '%s' is not a "
                     "token count in [1, 2047]\n",
                     argv[2]);
        return 1;
      }
    } else if (argc > 3) {
      std::fprintf(stderr, "usage: kv-bench-kernels --hw [TOKENS]\n");
      return 1;
    }
    return hardwareReport(tokens);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv))
    return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
