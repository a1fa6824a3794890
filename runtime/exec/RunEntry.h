//===- RunEntry.h - Calling a compiled program's entry ----------*- C++ -*-===//
//
// Calls an entry's `_kvrt_entry_<name>` wrapper on bound arguments over a
// fresh execution context (a backend, a model, a KV pool, optionally a block
// store) and reads its results, its work, its selective recomputes and its
// block store events back. No MLIR.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_EXEC_RUNENTRY_H
#define KVIR_RUNTIME_EXEC_RUNENTRY_H

#include "runtime/core/ComputeBackend.h"
#include "runtime/exec/ExecRuntime.h"
#include "runtime/exec/Manifest.h"
#include "runtime/exec/Values.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kvir::exec {

/// The block store a run's kv.load_block and kv.store_block use, and the
/// policy on its faults (KVRT_EXEC_STORE_FALLBACK or _FAIL).
struct BlockStoreBinding {
  kvrt_block_store *store = nullptr;
  int32_t policy = KVRT_EXEC_STORE_FALLBACK;
};

/// One interaction of a block op with the store (kvrt_exec_block_event with
/// its strings copied; the event's own pointers are cleared).
struct BlockEvent {
  kvrt_exec_block_event event{};
  std::string key, message;
};

/// The runtime calls of one site (kvrt_exec_site_time with its op copied).
struct SiteTime {
  int32_t site = KVRT_EXEC_NO_SITE;
  std::string op;
  int64_t calls = 0;
  double seconds = 0;
};

/// What one run of an entry did.
struct RunOutcome {
  std::vector<Value> results;
  WorkStats plan, setup;
  /// Selective recomputes executed, one record per op run.
  std::vector<kvrt_exec_repair> repairs;
  /// What kv.load_block and kv.store_block did with the block store.
  std::vector<BlockEvent> blockEvents;
  /// Each site's runtime calls and their wall time, in the order the sites
  /// first ran.
  std::vector<SiteTime> siteTimes;
  bool failed = false;
  kvrt_status status = KVRT_OK;
  std::string message;
  /// The site of the failing op (-1: none).
  int32_t site = KVRT_EXEC_NO_SITE;
  /// The longest context the run built (the highest position computed, plus
  /// one).
  int64_t contextTokens = 0;
};

/// Calls `entry` on `args` over a fresh execution context of `backend`,
/// `model` and `pool`, and reads the results back (views retained, logits
/// and tensors copied). A cache argument is a view of `pool` the caller
/// holds for the run (the context does not take it over).
/// With `maxContext` > 0, a prefill or attention at a position at or beyond
/// it fails at its site (createExecContext). kv.load_block and
/// kv.store_block use the block store of `blockStore`, when given.
RunOutcome runEntry(EntryFn entry, const EntryManifest &manifest,
                    ComputeBackend &backend, const kvrt_model *model,
                    kvrt_pool *pool, const std::vector<Value> &args,
                    int64_t maxContext = 0,
                    const BlockStoreBinding *blockStore = nullptr);

/// The context limit runners apply unless told otherwise: 8 times the
/// context the model was trained on (its seq_len). Positions beyond the
/// trained context were never seen in training; far beyond it the work is
/// also quadratic in the context.
int64_t defaultMaxContext(const kvrt_model_config &config);

} // namespace kvir::exec

#endif // KVIR_RUNTIME_EXEC_RUNENTRY_H
