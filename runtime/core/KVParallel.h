/*===- KVParallel.h - The runtime's thread pool (C ABI) -----------*- C -*-===//
 *
 * The generated CPU forward runs its heavy stages (the packed matmuls, the
 * attention of a prefill) on several threads through one function of the
 * runtime: it outlines a stage's loop into a task over a range of work items
 * and calls kvrt_parallel_for, whose threads (the caller among them) claim
 * contiguous blocks of [0, count) until none is left. The JIT binds the
 * symbol (driver/compiler), an ahead-of-time program resolves it from the
 * runner that links the runtime. A task must compute every item on its own,
 * whichever thread runs it and however the range is cut (the generated
 * tasks do: each output is one FMA chain in one item), so the output is
 * bit-identical for any thread count.
 *
 *===----------------------------------------------------------------------===*/

#ifndef KVIR_RUNTIME_CORE_KVPARALLEL_H
#define KVIR_RUNTIME_CORE_KVPARALLEL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// The most threads a parallel loop uses: more is a typo, not a machine.
#define KVRT_MAX_THREADS 1024

/// A task over the work items [begin, end) of a parallel loop; `context` is
/// what the caller passed.
typedef void (*kvrt_task_fn)(void *context, int64_t begin, int64_t end);

/// kvrt_parallel_for and kvrt_get_num_threads, which generated code calls:
/// declared from KVParallel.def, which documents them and from which the
/// JIT's symbol table and the CPU target's declarations come too.
#define KVRT_PARALLEL_C_VOID void
#define KVRT_PARALLEL_C_I32 int32_t
#define I32(n) int32_t n
#define I64(n) int64_t n
#define TASK(n) kvrt_task_fn n
#define PTR(n) void *n
#define NONE() void
#define KVRT_PARALLEL_FN(name, result, ...)                                    \
  KVRT_PARALLEL_C_##result name(__VA_ARGS__);
#include "runtime/core/KVParallel.def"
#undef I32
#undef I64
#undef TASK
#undef PTR
#undef NONE

/// Sets the number of threads parallel loops use (the caller included):
/// n >= 1, or 0 for the default (KVIR_THREADS if set, else the number of
/// cores), at most KVRT_MAX_THREADS (larger values are clamped). Takes
/// effect with the next loop.
void kvrt_set_num_threads(int32_t n);

#ifdef __cplusplus
} // extern "C"
#endif

#endif /* KVIR_RUNTIME_CORE_KVPARALLEL_H */
