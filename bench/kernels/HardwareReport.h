//===- HardwareReport.h - Every CPU figure against the machine --*- C++ -*-===//

#ifndef KVIR_BENCH_KERNELS_HARDWAREREPORT_H
#define KVIR_BENCH_KERNELS_HARDWAREREPORT_H

#include "bench/BenchSupport.h"

#include <cstdint>

namespace kvir::bench {

/// Prints this machine's single-core FMA peak and read bandwidth, then
/// prefill of `prefillTokens` tokens (synthetic dim 512 / 8 layers) on 1 and
/// 2 threads, the generated matmul against OpenBLAS on the model's weight
/// shapes, and decode attention (one query over 32768 tokens of a
/// Llama-3-8B-like layer) on f32, f16 and bf16 pages on 1 thread and on
/// every core, each against the read bandwidth of as many threads, in one
/// run. Returns 0, or 1 if a measurement could not be set up.
int hardwareReport(int64_t prefillTokens);

/// One streaming read of `buffer` (as readAll) by the runtime's parallel
/// loop on its current threads, in disjoint chunks: the read bandwidth of as
/// many threads.
void readInParallel(const ReadBuffer &buffer);

} // namespace kvir::bench

#endif // KVIR_BENCH_KERNELS_HARDWAREREPORT_H
