//===- KVFaults.h - Failing allocations on purpose, for tests ----*- C -*-===//
//
// A test hook of the runtime: arm it, and the n-th allocation of a kind from
// then on fails as if memory or the pool had run out. Tests walk n over
// every allocation of an edit, a compose, a prefill or a selective
// recompute and check that each failure is reported, that every cache that
// existed before is bit-identical after, and that nothing leaks
// (test/unit/cpu/FaultInjectionTest.cpp). Unarmed, a fault point costs one
// relaxed atomic increment.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_CORE_KVFAULTS_H
#define KVIR_RUNTIME_CORE_KVFAULTS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kvrt_fault_kind {
  /// Pages taken from a pool (kvrt_pool_alloc_pages, copy-on-write): fails
  /// with KVRT_ERR_POOL_EXHAUSTED.
  KVRT_FAULT_PAGES = 0,
  /// A model's weights (loading, synthetic models): KVRT_ERR_OUT_OF_MEMORY.
  KVRT_FAULT_WEIGHTS = 1,
  /// The working memory of a backend call (run tables, activations,
  /// logits; cpu and reference backends): KVRT_ERR_OUT_OF_MEMORY.
  KVRT_FAULT_SCRATCH = 2,
} kvrt_fault_kind;

/// From now on, the `nth` (1-based) allocation of `kind` fails; 0 disarms.
/// Resets the count of `kind`. Not meant to be used concurrently with
/// allocations on other threads.
void kvrt_fault_arm(kvrt_fault_kind kind, int64_t nth);

/// Allocations of `kind` since it was last armed (or the process started).
int64_t kvrt_fault_count(kvrt_fault_kind kind);

#ifdef __cplusplus
} // extern "C"
#endif

#endif // KVIR_RUNTIME_CORE_KVFAULTS_H
