//===- BenchSupport.h - Shared pieces of the benchmarks ---------*- C++ -*-===//

#ifndef KVIR_BENCH_BENCHSUPPORT_H
#define KVIR_BENCH_BENCHSUPPORT_H

#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

namespace kvir::bench {

/// The machine's single-core read bandwidth, the bound of decode attention:
/// a streaming read of a 256 MiB buffer (far beyond the last-level cache) with
/// an integer sum, which the compiler vectorises without reassociation
/// concerns. Reports bytes/s.
inline void measureReadBandwidth(benchmark::State &state) {
  size_t words = (size_t(256) << 20) / sizeof(uint64_t);
  std::vector<uint64_t> buffer(words);
  for (size_t i = 0; i < words; ++i)
    buffer[i] = i * 0x9e3779b97f4a7c15ULL;
  for (auto _ : state) {
    uint64_t sum = 0;
    for (uint64_t word : buffer)
      sum += word;
    benchmark::DoNotOptimize(sum);
  }
  state.SetBytesProcessed(state.iterations() * int64_t(words) *
                          int64_t(sizeof(uint64_t)));
}

} // namespace kvir::bench

#endif // KVIR_BENCH_BENCHSUPPORT_H
