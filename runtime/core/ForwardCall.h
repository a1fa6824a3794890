//===- ForwardCall.h - Filling the generated forward's arguments *- C++ -*-===//
//
// What every backend that runs the generated forward does alike: the run
// table of a view, the embedding rows of the tokens, the weights in the order
// of their fields (ModelTensors.def, ForwardABI.def), and the sizes of the
// buffers a call needs. Memory placement (host or device) stays with the
// backend.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_CORE_FORWARDCALL_H
#define KVIR_RUNTIME_CORE_FORWARDCALL_H

#include "runtime/core/ForwardABI.h"
#include "runtime/core/KVRuntime.h"
#include "runtime/core/ModelTensors.h"
#include "runtime/core/WeightFormat.h"

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

namespace kvir {

/// A view flattened for the forward: the page lists of its runs back to
/// back, and one RUNS row per run (ForwardABI.h).
struct RunTable {
  std::vector<int32_t> pages;
  std::vector<int64_t> rows;

  int64_t numRuns() const { return int64_t(rows.size()) / KVRT_RUN_WIDTH; }
  /// Appends a run (its page ids are copied).
  void append(const int32_t *runPages, int64_t nPages, int64_t slotBegin,
              int64_t nTokens, int64_t basePos, int64_t delta);
  /// Appends every run of `view`.
  kvrt_status appendView(const kvrt_view *view);
  /// Descriptors of the two arrays (host memory).
  kvrt_memref_i32 pagesRef();
  kvrt_memref_i64x2 rowsRef();
};

/// Attention tiles for the GPU forward (TILES rows: run, key_begin, key_end):
/// each run cut into tiles of at most some number of keys, so that about 512
/// blocks run for `queries` query tokens while the partials stay under 256
/// MiB.
std::vector<int64_t> attentionTiles(const RunTable &table, int64_t queries,
                                    int64_t heads, int64_t headSize);

/// Floats of the attention partials the GPU forward keeps for `queries`
/// query tokens and `tiles` tiles.
int64_t attentionPartialFloats(const kvrt_model_config &config, int64_t queries,
                               int64_t tiles);

/// Floats of a prefill's scratch buffer: n * (3 dim + 2 kv_dim + 2 hidden).
int64_t prefillScratchFloats(const kvrt_model_config &config, int64_t n);

/// The embedding rows of `n` tokens, [n][dim] floats: copied from an f32
/// embedding, dequantised from another format (Quant.h; not the forward's
/// math: the exact values every reader of the weight sees).
std::vector<float> embedTokens(const kvrt_model_config &config,
                               const kvrt_model_weights &weights,
                               const int32_t *tokens, int64_t n);

/// The formats of the weights of `model` the forward reads: what a forward
/// that runs it must be built for (all f32 for a null model).
WeightFormats modelWeightFormats(const kvrt_model *model);

/// How many weights the forward reads: the weight fields of its prefill
/// (ModelTensors.def's tensors read by the forward).
constexpr size_t kForwardWeights = kvrt::kNumForwardWeights;

/// The weights the forward reads, in the order of its weight fields
/// (ForwardABI.def).
using ForwardWeights = std::array<kvrt_weight, kForwardWeights>;
ForwardWeights forwardWeights(const kvrt_model_weights &weights);

/// The weight fields of `args`, in the same order.
std::array<kvrt_memref_weight *, kForwardWeights>
weightFields(kvrt_prefill_args &args);

/// The weight fields and the weight offsets of a prefill (ForwardABI.def):
/// for each weight the forward reads, the buffer its slices lie in and the
/// byte offset of each slice from its start.
struct WeightTable {
  std::array<kvrt_memref_weight, kForwardWeights> fields{};
  /// [weight][layer] byte offsets (n_layers columns).
  std::vector<int64_t> offsets;

  /// Sets the weight fields and weight_offsets of `args` (the table must
  /// outlive the call).
  void fill(kvrt_prefill_args &args);
};

/// The table of weights in host memory: each weight's buffer starts at its
/// lowest slice and ends after its highest (the slices of a GGUF tensor lie
/// in the one mapping of the file; those of an f32 model in its memory).
WeightTable hostWeightTable(const kvrt_model_config &config,
                            const kvrt_model_weights &weights);

/// Where the weights go in one device buffer: every slice of every weight
/// the forward reads copied to `at` (aligned to 256 bytes), `bytes` in all.
struct WeightUpload {
  struct Piece {
    const void *src;
    int64_t bytes;
    int64_t at;
  };
  std::vector<Piece> pieces;
  int64_t bytes = 0;
  /// The table with offsets from the device buffer's start; table(base)
  /// points the fields at `base`.
  WeightTable table(void *base) const;

private:
  friend WeightUpload planWeightUpload(const kvrt_model_config &,
                                       const kvrt_model_weights &);
  std::vector<int64_t> offsets;
};
WeightUpload planWeightUpload(const kvrt_model_config &config,
                              const kvrt_model_weights &weights);

/// The f32 matrices the forward multiplies (every layer's wq .. w3 and the
/// classifier) packed once into the panels of the CPU forward's packed
/// matmul (ForwardABI.def: packed, packed_offsets, panel_width;
/// docs/cpu-backend.md, "The matmul"), so that a prefill, and every segment
/// a plan recomputes, multiplies without packing. The classifier's panels
/// serve calls that ask for the logits of at least 4 rows (an edit's
/// answer); the last row's alone take the dot-product kernel.
struct PackedWeights {
  /// Outputs per panel.
  int64_t width = 0;
  /// [weight][layer] float offsets into `data` (the rows of weight_offsets),
  /// -1 where a slice is not packed.
  std::vector<int64_t> offsets;
  /// The panels, 64-byte aligned.
  std::unique_ptr<float, void (*)(void *)> data{nullptr, nullptr};
  int64_t floats = 0;
};

/// The packed weights of `model` for panels of `width` outputs: packed on
/// the first call (once per model, whichever thread calls first; the others
/// wait) and kept with the model for every program and call. Null when the
/// first call packed them for another width (the forward then packs per
/// call).
const PackedWeights *packedWeights(const kvrt_model &model, int64_t width);

/// The Q8_0 matrices the forward multiplies (every layer's wq .. w3 and the
/// classifier, where Q8_0), and its Q4_K ones where all its matrices take
/// at most 16 MiB (a step in the cache: ForwardCall.cpp says why), repacked
/// once for a decode step's integer dots (ForwardABI.def: decode_rows,
/// decode_rows_offsets; kvrt::repackDecodeRows, Quant.h; docs/cpu-backend.md,
/// "A layout for decode").
struct DecodeRows {
  /// [weight][layer] byte offsets into `data` (the rows of weight_offsets),
  /// -1 where a slice is not repacked.
  std::vector<int64_t> offsets;
  /// The repacked rows, 64-byte aligned, on 2 MiB pages where granted.
  std::unique_ptr<uint8_t, void (*)(void *)> data{nullptr, nullptr};
  int64_t bytes = 0;
  /// The file slices they replace (their first bytes), whose pages a mapped
  /// model gives back (MADV_DONTNEED: the page cache keeps them; a reader
  /// of the file's rows, the oracle's, faults them in again), and the bytes
  /// of those slices.
  std::vector<const void *> released;
  int64_t releasedBytes = 0;
};

/// The decode rows of `model`: repacked on the first call (once per model,
/// on the runtime pool's threads; the other callers wait) and kept with the
/// model for every program and call, or null where this CPU has no AVX-512
/// VNNI (the forward's decode then reads no repacked rows), the model was
/// loaded with KVRT_LOAD_NO_REPACK, the host keeps the file's rows (AMX;
/// ForwardCall.cpp says why) and the model was not loaded with
/// KVRT_LOAD_REPACK, or it has no Q8_0 or Q4_K matrix.
const DecodeRows *decodeRows(const kvrt_model &model);

/// Bytes of the packed weights `model` holds (0 before packedWeights and
/// decodeRows): the f32 panels and the decode rows.
uint64_t packedWeightBytes(const kvrt_model &model);

/// Bytes of the file's rows the decode rows replaced in the mapping of a
/// mapped model (DecodeRows::releasedBytes; 0 before decodeRows).
uint64_t releasedWeightBytes(const kvrt_model &model);

/// Of the bytes kvrt::weightBytes and packedWeightBytes count, less
/// releasedWeightBytes, those on huge pages now (kvrt::hugePageBytes): where
/// the kernel granted 2 MiB pages to the file's mapping, the model's own
/// copy, the packed panels and the decode rows.
uint64_t weightHugePageBytes(const kvrt_model &model);

/// Fails unless a view's pool `layout` is the shape of model `c` (layers,
/// KV heads, head size) and has the K/V element type `forward` was compiled
/// for, with a message that names both.
kvrt_status checkForwardLayout(const Forward &forward,
                               const kvrt_model_config &c,
                               const kvrt_page_layout &layout);

} // namespace kvir

#endif // KVIR_RUNTIME_CORE_FORWARDCALL_H
