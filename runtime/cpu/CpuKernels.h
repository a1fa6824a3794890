//===- CpuKernels.h - ABI of the generated CPU kernels ----------*- C++ -*-===//
//
// The C interface (`llvm.emit_c_interface`) of the functions that the
// convert-kv-to-cpu pass emits for a model config, as host code calls them.
// No MLIR dependency: the kernels may come from the JIT (runtime/cpu/jit) or,
// later, from an ahead-of-time compiled object exporting the same
// `_mlir_ciface_<prefix>_<kernel>` symbols.
//
// Every memref argument is a pointer to a descriptor (MemRef<T, N>). Buffers:
//  - x:       [n][dim] f32 embedding rows (prefill overwrites it: residual
//             stream);
//  - weights: flat f32 tensors in llama2.c order (kvrt_model_weights);
//  - kv:      the pool's arena from kvrt_page_layout::base, size
//             capacity_pages * page_stride, addressed as KVRuntime.h says;
//  - pages:   int32 page ids, the page lists of all runs concatenated;
//  - runs:    the run table, [n_runs][8] int64 (RunTable below);
//  - logits:  [n - logits_from][vocab] f32.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_CPU_CPUKERNELS_H
#define KVIR_RUNTIME_CPU_CPUKERNELS_H

#include "runtime/core/KVRuntime.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace kvir::cpu {

/// A ranked memref descriptor, laid out as MLIR's LLVM lowering expects.
template <typename T, int N> struct MemRef {
  T *allocated;
  T *aligned;
  int64_t offset;
  int64_t sizes[N];
  int64_t strides[N];
};

/// A contiguous 1-D descriptor of `size` elements at `data`.
template <typename T> MemRef<T, 1> memref1D(T *data, int64_t size) {
  return {data, data, 0, {size}, {1}};
}

/// `<prefix>_prefill`: the forward of n tokens at positions pos .. pos+n-1
/// over the runs of the table, whose last run is the new one (its pages get
/// the K/V of layers 0 .. nLayers-1); with nLayers = n_layers, the logits of
/// positions logits_from .. n-1 (none when logits_from = n).
using PrefillFn = void (*)(MemRef<float, 1> *x, MemRef<float, 1> *rmsAtt,
                           MemRef<float, 1> *wq, MemRef<float, 1> *wk,
                           MemRef<float, 1> *wv, MemRef<float, 1> *wo,
                           MemRef<float, 1> *rmsFfn, MemRef<float, 1> *w1,
                           MemRef<float, 1> *w2, MemRef<float, 1> *w3,
                           MemRef<float, 1> *rmsFinal, MemRef<float, 1> *wcls,
                           MemRef<float, 1> *kv, MemRef<int32_t, 1> *pages,
                           MemRef<int64_t, 2> *runs, int64_t pageTokens,
                           int64_t pos, int64_t n, int64_t nLayers,
                           int64_t logitsFrom, MemRef<float, 1> *logits);

/// `<prefix>_attention`: n queries ([n][heads][head_size], not rotated; query
/// t at position pos + t) over the runs of the table, layer `layer`; `out`
/// receives [n][heads][head_size].
using AttentionFn = void (*)(MemRef<float, 1> *q, int64_t n, int64_t pos,
                             MemRef<float, 1> *kv, MemRef<int32_t, 1> *pages,
                             MemRef<int64_t, 2> *runs, int64_t layer,
                             int64_t pageTokens, MemRef<float, 1> *out);

/// `<prefix>_materialize`: writes every run's K/V into `dstPages` (parallel
/// to `pages`, same slots) of the arena `dst`, K rotated once by the run's Δ,
/// V copied: the runs become offset 0 at base_pos + Δ (kv.materialize).
using MaterializeFn = void (*)(MemRef<float, 1> *kv, MemRef<int32_t, 1> *pages,
                               MemRef<int64_t, 2> *runs, MemRef<float, 1> *dst,
                               MemRef<int32_t, 1> *dstPages,
                               int64_t pageTokens);

/// The kernels of one model config and what keeps their code alive.
struct CpuKernels {
  PrefillFn prefill = nullptr;
  AttentionFn attention = nullptr;
  MaterializeFn materialize = nullptr;
  /// The owner of the code (an ExecutionEngine, a loaded object).
  std::shared_ptr<void> owner;
};

/// Columns of a run-table row.
enum RunColumn : int {
  /// Index into the page list of the run's first page.
  kRunPageOffset = 0,
  kRunSlotBegin = 1,
  kRunTokens = 2,
  kRunBasePos = 3,
  kRunDelta = 4,
  /// Columns 5..7 are reserved (zero).
  kRunWidth = 8,
};

/// A view flattened for the kernels: the page lists of its runs, back to back,
/// and one row per run.
struct RunTable {
  std::vector<int32_t> pages;
  std::vector<int64_t> rows;

  int64_t numRuns() const { return int64_t(rows.size()) / kRunWidth; }
  /// Appends a run (its pages are copied).
  void append(const int32_t *runPages, int64_t nPages, int64_t slotBegin,
              int64_t nTokens, int64_t basePos, int64_t delta);
  MemRef<int32_t, 1> pagesRef();
  MemRef<int64_t, 2> rowsRef();
};

/// The run table of `view`.
kvrt_status buildRunTable(const kvrt_view *view, RunTable *table);

} // namespace kvir::cpu

#endif // KVIR_RUNTIME_CPU_CPUKERNELS_H
