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

/// Runs task(context, begin, end) over ranges that cover [0, count) once, on
/// up to kvrt_get_num_threads() threads, and returns when all are done
/// (count below 2^31 items; more run on the calling thread). A
/// call from inside a task, or while another thread's call holds the pool,
/// runs the whole range on the calling thread.
void kvrt_parallel_for(int64_t count, kvrt_task_fn task, void *context);

/// Sets the number of threads parallel loops use (the caller included):
/// n >= 1, or 0 for the default (KVIR_THREADS if set, else the number of
/// cores), at most KVRT_MAX_THREADS (larger values are clamped). Takes
/// effect with the next loop.
void kvrt_set_num_threads(int32_t n);

/// The number of threads parallel loops use.
int32_t kvrt_get_num_threads(void);

#ifdef __cplusplus
} // extern "C"
#endif

#endif /* KVIR_RUNTIME_CORE_KVPARALLEL_H */
