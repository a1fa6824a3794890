//===- CpuParallel.h - Parallel loops of the CPU forward --------*- C++ -*-===//
//
// Internal to KVToCPU. A parallel loop of a kernel is outlined into a task
// function over a range of work items, and its call site hands the task to
// the runtime's thread pool (runtime/core/KVParallel.h): kvrt_parallel_for
// runs it on several threads, the caller among them; kvrt_get_num_threads
// says how many. Both are declared and called as runtime/core/KVParallel.def
// declares them (KVToRuntime/ExecABI.h).
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_PASSES_CONVERSION_KVTOCPU_CPUPARALLEL_H
#define KVIR_PASSES_CONVERSION_KVTOCPU_CPUPARALLEL_H

#include "passes/Conversion/Forward/ForwardEmitter.h"

namespace mlir::kv::cpu {

/// Declares the thread pool's functions at the end of the module (once per
/// forward: buildForward keeps one declaration per module).
void declareParallelRuntime(ForwardEmitter &e);

/// The number of threads parallel loops use (index).
Value numThreads(ForwardEmitter &e);

/// A parallel loop over `count` work items: `body` becomes the task
/// `<prefix>_<task>(context, begin, end)`, emitted as a function of its
/// own, which receives `captures` (memrefs, index and i64 values) through
/// a context struct on the caller's stack and emits the work of items
/// [begin, end); the call site hands it to the runtime's
/// kvrt_parallel_for, which runs it on several threads.
void parallelFor(
    ForwardEmitter &e, StringRef task, Value count, ValueRange captures,
    function_ref<void(ValueRange captures, Value begin, Value end)> body);

} // namespace mlir::kv::cpu

#endif // KVIR_PASSES_CONVERSION_KVTOCPU_CPUPARALLEL_H
