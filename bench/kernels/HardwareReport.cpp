//===- HardwareReport.cpp - CPU figures against the machine -----*- C++ -*-===//
//
// The first part of `kv-bench --hw` (docs/cpu-backend.md): this machine's
// single-core FMA peak and read bandwidth and, as fractions of them, prefill
// on 1 and 2 threads, the generated matmul against OpenBLAS on the model's
// shapes, and decode attention on f32, f16 and bf16 pages on 1 thread and on
// every core.
//
//===----------------------------------------------------------------------===//

#include "bench/kernels/HardwareReport.h"
#include "bench/kernels/KernelFixtures.h"

#include <algorithm>

namespace kvir::bench {
namespace {

constexpr int kRepeats = 5;

} // namespace

void readInParallel(const ReadBuffer &buffer) {
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

// On a machine shared with other work every figure is the best of kRepeats
// rounds, and what is compared is measured in alternating rounds (1 and 2
// threads, generated and OpenBLAS, bandwidth and attention) so that both
// sides see the same disturbance; the peak is sampled between the sections
// and its best is the one divided by.
int hardwareReport(int64_t prefillTokens) {
  using namespace kernels;
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
  ReadBuffer buffer = readBandwidthBuffer();
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
              (long long)(kvBytes(KVRT_KV_F32) >> 20),
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

} // namespace kvir::bench
