//===- KernelBench.cpp - Generated CPU kernels vs baselines -----*- C++ -*-===//
//
// Side by side, with Google Benchmark (the generated forward JIT-compiled by
// the compiler driver, as kv-run compiles it into a program's module):
//  - prefill through the generated CPU backend vs the reference oracle
//    (tokens/s), on stories260K and on a synthetic model of realistic shape;
//  - generated decode attention (one query over 32768 tokens of a
//    Llama-3-8B-like layer: 32 query heads, 8 KV heads of 128, half RoPE,
//    f32 K/V = 256 MiB; f16 and bf16 pages 128 MiB) in bytes/s, next to the
//    single-core read bandwidth;
//  - that attention over 1 unshifted run, 16 and 256 shifted runs, and the
//    materialized alternative (the generated key rewrite, then 1 run);
//  - the generated matmul alone vs OpenBLAS's cblas_sgemm (when built with
//    libopenblas-dev; linked into this benchmark only) and the FMA peak;
//  - a hand-written copy of the Q8_0 decode tile (Q8TileModel.h) beside the
//    plain read bandwidth: what the decode pattern can read here; the same
//    product over rows repacked 16 at a time, and what repacking costs;
//  - a hand-written copy of the Q4_K decode tile over repacked rows
//    (Q4KRowsModel.h) and the generated decode matmul on the same buffer.
// Every figure against the machine's limits in one run: `kv-bench --hw`.
//
//===----------------------------------------------------------------------===//

#include "bench/kernels/HardwareReport.h"
#include "bench/kernels/KernelFixtures.h"
#include "bench/kernels/Q4KRowsModel.h"
#include "bench/kernels/Q8TileModel.h"
#include "driver/version/Version.h"
#include "runtime/core/HugePages.h"

#include <cstring>
#include <map>
#include <memory>
#include <utility>

namespace {

using namespace kvir::bench;
using namespace kvir::bench::kernels;

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
  state.SetBytesProcessed(state.iterations() * kvBytes(KVRT_KV_F32));
  state.SetLabel("materialized (rewrite keys, then 1 run)");
}
BENCHMARK(BM_GeneratedDecodeAttentionMaterialized)
    ->ArgName("runs")
    ->Arg(16)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

/// The fp32 FMA peak of `threads` threads of the runtime's pool, each
/// running the peak loop on its share of 64 equal pieces: beside
/// BM_ReadBandwidth, how this machine's compute scales with threads against
/// its memory (a VM's two vCPUs on one physical core would share its vector
/// units and give well under twice one thread's FLOP/s). On the 2-core Zen 4
/// machine, 2026-12-04: 114 and 227 GFLOP/s on 1 and 2 threads, the read
/// bandwidth 25.4 and 33.6 GB/s in the same run.
void BM_FmaPeak(benchmark::State &state) {
  constexpr int64_t kPieces = 64, kPieceIterations = int64_t(1) << 16;
  kvrt_set_num_threads(int(state.range(0)));
  double flops = 0;
  for (auto _ : state) {
    double pieces[kPieces];
    kvrt_parallel_for(
        kPieces,
        [](void *context, int64_t begin, int64_t end) {
          for (int64_t p = begin; p < end; ++p)
            static_cast<double *>(context)[p] =
                kvir::bench::runFmaPeak(kPieceIterations);
        },
        pieces);
    for (double piece : pieces)
      flops += piece;
  }
  kvrt_set_num_threads(0);
  state.counters["flops"] =
      benchmark::Counter(flops, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_FmaPeak)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

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

/// The read bandwidth of `threads` threads of the runtime's pool reading
/// disjoint parts of a 256 MiB buffer on huge pages: the yardstick of decode
/// on as many threads (bench/peer/side-by-side.sh).
void BM_ReadBandwidth(benchmark::State &state) {
  kvir::bench::ReadBuffer buffer = kvir::bench::readBandwidthBuffer();
  kvrt_set_num_threads(int(state.range(0)));
  for (auto _ : state)
    kvir::bench::readInParallel(buffer);
  kvrt_set_num_threads(0);
  state.SetBytesProcessed(state.iterations() * int64_t(buffer.size()) *
                          int64_t(sizeof(uint64_t)));
}
BENCHMARK(BM_ReadBandwidth)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

/// The model of `key`, made by `make` the first time it is asked for and
/// kept for the process: the benchmarks over one buffer share it.
template <typename Model, typename Key, typename Make>
std::unique_ptr<Model> &sharedModel(const Key &key, Make make) {
  static std::map<Key, std::unique_ptr<Model>> models;
  std::unique_ptr<Model> &model = models[key];
  if (!model)
    model = make();
  return model;
}

/// A hand-written tile model (Q8TileModel, Q4KRowsModel) made once per
/// `key` by `make`, on state.range(0) threads of the runtime's pool, after
/// checking its sums against a scalar dot (`mismatch` says otherwise);
/// bytes/s.
template <typename Model, typename Key, typename Make>
void runTileModel(benchmark::State &state, const Key &key, Make make,
                  const char *mismatch) {
  if (!Model::supported()) {
    state.SkipWithError("needs AVX-512 (F, BW, VL), VNNI and F16C");
    return;
  }
  std::unique_ptr<Model> &model = sharedModel<Model>(key, make);
  if (!model->valid()) {
    state.SkipWithError("could not allocate the weights");
    return;
  }
  kvrt_set_num_threads(int(state.range(0)));
  if (!model->matchesScalar()) {
    kvrt_set_num_threads(0);
    state.SkipWithError(mismatch);
    return;
  }
  for (auto _ : state)
    benchmark::DoNotOptimize(model->run());
  kvrt_set_num_threads(0);
  state.SetBytesProcessed(state.iterations() * model->bytesRead());
}

/// The Q8_0 product of `matrices` matrices of TinyLlama's gate shape (5632 x
/// 2048, 12.3 MB each, on huge pages) in `layout` (Q8TileModel.h), checked
/// against a scalar Q8_0 dot.
void runQ8Model(benchmark::State &state, int64_t matrices, Q8Layout layout) {
  runTileModel<Q8TileModel>(
      state, std::pair{matrices, layout},
      [&] { return std::make_unique<Q8TileModel>(matrices, layout); },
      "the tile's sums differ from a scalar Q8_0 dot");
}

/// A hand-written copy of the generated Q8_0 decode tile over 22 matrices
/// (262 MB): what the decode step's pattern reads a second here, beside
/// BM_ReadBandwidth's plain stream. Run the two interleaved
/// (docs/cpu-backend.md, "What the Q8_0 pattern reaches").
void BM_Q8TileModel(benchmark::State &state) {
  runQ8Model(state, 22, Q8Layout::File);
}
/// The same product over the rows repacked 16 at a time (Q8Layout::Rows16):
/// what a decode step could read a second in a layout other than the file's
/// (docs/cpu-backend.md, "A layout for decode").
void BM_Q8Rows16Model(benchmark::State &state) {
  runQ8Model(state, 22, Q8Layout::Rows16);
}
/// Both over one matrix (12.3 MB, in the L3 after the first run): what the
/// two patterns compute a second where memory does not hold them back.
void BM_Q8TileModelCached(benchmark::State &state) {
  runQ8Model(state, 1, Q8Layout::File);
}
void BM_Q8Rows16ModelCached(benchmark::State &state) {
  runQ8Model(state, 1, Q8Layout::Rows16);
}
BENCHMARK(BM_Q8TileModel)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_Q8Rows16Model)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_Q8TileModelCached)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_Q8Rows16ModelCached)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

/// The Q4_K product of `matrices` matrices of TinyLlama's gate shape (5632 x
/// 2048, 6.8 MB each repacked, on huge pages) over rows repacked for decode
/// (Q4KRowsModel.h), on state.range(0) threads of the runtime's pool, after
/// checking its sums against the dequantised file rows; bytes/s.
void runQ4KModel(benchmark::State &state, int64_t matrices) {
  runTileModel<Q4KRowsModel>(
      state, matrices, [&] { return std::make_unique<Q4KRowsModel>(matrices); },
      "the tile's sums differ from the file rows' dot");
}

/// A hand-written copy of the tile over Q4_K rows repacked for decode, 60
/// matrices (410 MB): what that layout lets a decode step read a second from
/// memory (docs/cpu-backend.md, "A layout for decode"); and over one matrix
/// (6.8 MB, in the L3 after the first run): what it computes a second.
void BM_Q4KRows16Model(benchmark::State &state) { runQ4KModel(state, 60); }
void BM_Q4KRows16ModelCached(benchmark::State &state) { runQ4KModel(state, 1); }

/// The generated decode matmul (compileQuantMatmul: the forward's Q4_K
/// kernel over rows repacked for decode) on the same matrices, one call a
/// matrix: the generated tile beside the hand-written one on one buffer,
/// so that what differs between them is the code. With `fileRows`, over the
/// first matrix in the file's layout instead (one matrix). Checked first as
/// the hand-written tile is.
void runGeneratedQ4K(benchmark::State &state, int64_t matrices,
                     bool fileRows = false) {
  if (!Q4KRowsModel::supported()) {
    state.SkipWithError("needs AVX-512 (F, BW, VL), VNNI and F16C");
    return;
  }
  std::unique_ptr<Q4KRowsModel> &model = sharedModel<Q4KRowsModel>(
      matrices, [&] { return std::make_unique<Q4KRowsModel>(matrices); });
  if (!model->valid()) {
    state.SkipWithError("could not allocate the weights");
    return;
  }
  if (!model->compileGenerated()) {
    state.SkipWithError(kvrt_last_error());
    return;
  }
  kvrt_set_num_threads(int(state.range(0)));
  if (!(fileRows ? model->generatedFileMatchesScalar()
                 : model->generatedMatchesScalar())) {
    kvrt_set_num_threads(0);
    state.SkipWithError("the generated sums differ from the file rows' dot");
    return;
  }
  std::vector<float> out(static_cast<size_t>(Q4KRowsModel::kRows));
  for (auto _ : state)
    benchmark::DoNotOptimize(fileRows ? model->runGeneratedFile(out.data())
                                      : model->runGenerated());
  kvrt_set_num_threads(0);
  state.SetBytesProcessed(state.iterations() * (fileRows
                                                    ? model->fileBytesRead()
                                                    : model->bytesRead()));
}
void BM_Q4KRows16Generated(benchmark::State &state) {
  runGeneratedQ4K(state, 60);
}
void BM_Q4KRows16GeneratedCached(benchmark::State &state) {
  runGeneratedQ4K(state, 1);
}
/// The generated matmul over the first matrix in the file's layout (6.5 MB,
/// in the L3 after the first run): what the file rows' tile computes a
/// second, beside BM_Q4KRows16GeneratedCached over the same rows repacked.
void BM_Q4KFileGeneratedCached(benchmark::State &state) {
  runGeneratedQ4K(state, 1, /*fileRows=*/true);
}
BENCHMARK(BM_Q4KFileGeneratedCached)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_Q4KRows16Generated)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_Q4KRows16GeneratedCached)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_Q4KRows16Model)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_Q4KRows16ModelCached)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

/// What the repacking costs: the 262 MB of BM_Q8TileModel's rows repacked
/// into Rows16 (Q8TileModel::repackRows16) on state.range(0) threads, bytes
/// read a second (a load would pay it once per Q8_0 weight, and would fault
/// in the destination besides: here it is written once before timing).
void BM_Q8Repack(benchmark::State &state) {
  static Q8TileModel file(22);
  static void *packed = [] {
    void *to = kvrt::allocateStreamed(size_t(file.bytesRead()));
    if (to)
      std::memset(to, 0, size_t(file.bytesRead()));
    return to;
  }();
  if (!file.valid() || !packed) {
    state.SkipWithError("could not allocate the weights");
    return;
  }
  kvrt_set_num_threads(int(state.range(0)));
  for (auto _ : state) {
    Q8TileModel::repackRows16(file.bytes, static_cast<uint8_t *>(packed),
                              file.matrices * file.rows);
    benchmark::ClobberMemory();
  }
  kvrt_set_num_threads(0);
  state.SetBytesProcessed(state.iterations() * file.bytesRead());
}
BENCHMARK(BM_Q8Repack)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

} // namespace

int main(int argc, char **argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--hw") == 0) {
      std::fprintf(stderr, "kv-bench-kernels: the hardware report is "
                           "`kv-bench --hw` (docs/cpu-backend.md)\n");
      return 1;
    } else if (std::strcmp(argv[i], "--version") == 0) {
      std::fputs(kvir::versionText("kv-bench-kernels").c_str(), stdout);
      return 0;
    }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv))
    return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
