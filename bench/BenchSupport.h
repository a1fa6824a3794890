//===- BenchSupport.h - Shared pieces of the benchmarks ---------*- C++ -*-===//

#ifndef KVIR_BENCH_BENCHSUPPORT_H
#define KVIR_BENCH_BENCHSUPPORT_H

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <vector>

#include <sys/mman.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kvir::bench {

/// Memory for the bandwidth yardstick as the runtime's kv pools get it
/// (runtime/core/KVPool.cpp): aligned to 2 MiB and advised to be backed by
/// transparent huge pages, so that both sides of a comparison see the same
/// TLB.
template <typename T> struct HugePageAllocator {
  using value_type = T;
  static constexpr size_t kHugePageBytes = size_t(2) << 20;
  HugePageAllocator() = default;
  template <typename U> HugePageAllocator(const HugePageAllocator<U> &) {}
  T *allocate(size_t n) {
    size_t bytes =
        (n * sizeof(T) + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
    void *p = std::aligned_alloc(kHugePageBytes, bytes);
    if (!p)
      throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
    (void)::madvise(p, bytes, MADV_HUGEPAGE);
#endif
    return static_cast<T *>(p);
  }
  void deallocate(T *p, size_t) { std::free(p); }
  template <typename U> bool operator==(const HugePageAllocator<U> &) const {
    return true;
  }
};
using ReadBuffer = std::vector<uint64_t, HugePageAllocator<uint64_t>>;

/// The machine's single-core read bandwidth, the bound of decode attention:
/// a streaming read of a 256 MiB buffer (far beyond the last-level cache) with
/// an integer sum, which the compiler vectorises without reassociation
/// concerns. Reports bytes/s.
inline ReadBuffer readBandwidthBuffer() {
  size_t words = (size_t(256) << 20) / sizeof(uint64_t);
  ReadBuffer buffer(words);
  for (size_t i = 0; i < words; ++i)
    buffer[i] = i * 0x9e3779b97f4a7c15ULL;
  return buffer;
}

/// One streaming read of `buffer`.
inline void readAll(const ReadBuffer &buffer) {
  uint64_t sum = 0;
  for (uint64_t word : buffer)
    sum += word;
  benchmark::DoNotOptimize(sum);
}

inline void measureReadBandwidth(benchmark::State &state) {
  ReadBuffer buffer = readBandwidthBuffer();
  for (auto _ : state)
    readAll(buffer);
  state.SetBytesProcessed(state.iterations() * int64_t(buffer.size()) *
                          int64_t(sizeof(uint64_t)));
}

/// The shortest wall time of `repeats` calls of `f`, in seconds: on a
/// machine shared with other work, the least disturbed run.
template <typename F> double bestSeconds(int repeats, F &&f) {
  double best = 1e300;
  for (int r = 0; r < repeats; ++r) {
    auto start = std::chrono::steady_clock::now();
    f();
    std::chrono::duration<double> took =
        std::chrono::steady_clock::now() - start;
    best = took.count() < best ? took.count() : best;
  }
  return best;
}

/// One core's fp32 FMA peak: 12 independent chains of 16-lane FMAs
/// (AVX-512; 8-lane AVX2 FMAs where the host has no AVX-512), enough to
/// cover the FMA latency on every current x86 core. Returns FLOP/s (2 per
/// lane and FMA) of `seconds` of work; `*sink` keeps the results alive.
#if defined(__x86_64__)
__attribute__((target("avx512f"))) inline double
fmaPeakAvx512(int64_t iterations, float *sink) {
  typedef float v16 __attribute__((vector_size(64)));
  v16 acc[12];
  for (int i = 0; i < 12; ++i)
    for (int l = 0; l < 16; ++l)
      acc[i][l] = float(i + l) * 1e-3f;
  v16 x, y;
  for (int l = 0; l < 16; ++l) {
    x[l] = 0.999f;
    y[l] = 1e-4f;
  }
  for (int64_t it = 0; it < iterations; ++it) {
    for (int i = 0; i < 12; ++i)
      acc[i] = (v16)_mm512_fmadd_ps((__m512)acc[i], (__m512)x, (__m512)y);
    __asm__ volatile("" : "+v"(x));
  }
  v16 sum = acc[0];
  for (int i = 1; i < 12; ++i)
    sum += acc[i];
  *sink = sum[0];
  return double(iterations) * 12 * 16 * 2;
}
__attribute__((target("avx2,fma"))) inline double
fmaPeakAvx2(int64_t iterations, float *sink) {
  typedef float v8 __attribute__((vector_size(32)));
  v8 acc[12];
  for (int i = 0; i < 12; ++i)
    for (int l = 0; l < 8; ++l)
      acc[i][l] = float(i + l) * 1e-3f;
  v8 x, y;
  for (int l = 0; l < 8; ++l) {
    x[l] = 0.999f;
    y[l] = 1e-4f;
  }
  for (int64_t it = 0; it < iterations; ++it) {
    for (int i = 0; i < 12; ++i)
      acc[i] = (v8)_mm256_fmadd_ps((__m256)acc[i], (__m256)x, (__m256)y);
    __asm__ volatile("" : "+v"(x));
  }
  v8 sum = acc[0];
  for (int i = 1; i < 12; ++i)
    sum += acc[i];
  *sink = sum[0];
  return double(iterations) * 12 * 8 * 2;
}
#endif

/// FLOPs of `iterations` rounds of the peak loop, run on this thread.
inline double runFmaPeak(int64_t iterations) {
  float sink = 0;
#if defined(__x86_64__)
  double flops = __builtin_cpu_supports("avx512f")
                     ? fmaPeakAvx512(iterations, &sink)
                     : fmaPeakAvx2(iterations, &sink);
#else
  double flops = 0;
#endif
  benchmark::DoNotOptimize(sink);
  return flops;
}

} // namespace kvir::bench

#endif // KVIR_BENCH_BENCHSUPPORT_H
