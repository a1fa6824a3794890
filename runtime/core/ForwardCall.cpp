//===- ForwardCall.cpp - Filling the generated forward's arguments -*- C++ -*-//

#include "runtime/core/ForwardCall.h"
#include "runtime/core/HugePages.h"
#include "runtime/core/KVParallel.h"
#include "runtime/core/Model.h"
#include "runtime/core/ModelConfig.h"
#include "runtime/core/Quant.h"
#include "runtime/core/Support.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include <sys/mman.h>
#include <unistd.h>

using namespace kvir;

void RunTable::append(const int32_t *runPages, int64_t nPages,
                      int64_t slotBegin, int64_t nTokens, int64_t basePos,
                      int64_t delta) {
  int64_t row[KVRT_RUN_WIDTH] = {
      int64_t(pages.size()), slotBegin, nTokens, basePos, delta, 0, 0, 0};
  pages.insert(pages.end(), runPages, runPages + nPages);
  rows.insert(rows.end(), row, row + KVRT_RUN_WIDTH);
}

kvrt_status RunTable::appendView(const kvrt_view *view) {
  if (!view)
    return kvrt::nullArgument(__func__);
  for (int64_t r = 0, e = kvrt_view_num_runs(view); r < e; ++r) {
    kvrt_run run;
    if (kvrt_status s = kvrt_view_get_run(view, r, &run))
      return s;
    append(run.pages, run.n_pages, run.slot_begin, run.n_tokens, run.base_pos,
           run.delta);
  }
  return KVRT_OK;
}

kvrt_memref_i32 RunTable::pagesRef() {
  return memrefI32(pages.data(), int64_t(pages.size()));
}

kvrt_memref_i64x2 RunTable::rowsRef() {
  return memrefTable(rows.data(), numRuns(), KVRT_RUN_WIDTH);
}

std::vector<int64_t> kvir::attentionTiles(const RunTable &table,
                                          int64_t queries, int64_t heads,
                                          int64_t headSize) {
  auto runTokens = [&](int64_t r) {
    return table.rows[r * KVRT_RUN_WIDTH + KVRT_RUN_TOKENS];
  };
  int64_t total = 0, longest = 1;
  for (int64_t r = 0; r < table.numRuns(); ++r) {
    total += runTokens(r);
    longest = std::max(longest, runTokens(r));
  }
  // About 512 blocks (4 per SM of an H200, one wave of attn_tile_one):
  // enough keys in flight for the memory system, few enough tiles that each
  // block's fixed work (the query's rotation) and attn_merge's pass over the
  // tiles stay small next to the keys.
  constexpr int64_t kTargetBlocks = 512;
  int64_t target = std::max<int64_t>(
      1, kTargetBlocks / std::max<int64_t>(1, queries * heads));
  int64_t tile = std::max<int64_t>(32, (total + target - 1) / target);
  auto count = [&](int64_t t) {
    int64_t c = 0;
    for (int64_t r = 0; r < table.numRuns(); ++r)
      c += std::max<int64_t>(1, (runTokens(r) + t - 1) / t);
    return c;
  };
  const int64_t budget = int64_t(256) << 20;
  while (tile < longest &&
         queries * heads * count(tile) * (headSize + 2) * 4 > budget)
    tile *= 2;
  std::vector<int64_t> tiles;
  for (int64_t r = 0; r < table.numRuns(); ++r) {
    int64_t nt = runTokens(r);
    for (int64_t b = 0; b == 0 || b < nt; b += tile) {
      int64_t row[KVRT_TILE_WIDTH] = {r, b, std::min(b + tile, nt), 0};
      tiles.insert(tiles.end(), row, row + KVRT_TILE_WIDTH);
    }
  }
  return tiles;
}

int64_t kvir::attentionPartialFloats(const kvrt_model_config &c,
                                     int64_t queries, int64_t tiles) {
  return queries * c.n_heads * tiles * (headSize(c) + 2);
}

int64_t kvir::prefillScratchFloats(const kvrt_model_config &c, int64_t n) {
  return n * (3 * int64_t(c.dim) + 2 * int64_t(kvDim(c)) +
              2 * int64_t(c.hidden_dim));
}

std::vector<float> kvir::embedTokens(const kvrt_model_config &c,
                                     const kvrt_model_weights &w,
                                     const int32_t *tokens, int64_t n) {
  const kvrt_weight_slice &embedding = w.token_embedding.slices[0];
  int64_t rowBytes = kvrt::weightRowBytes(embedding.format, c.dim);
  const auto *bytes = static_cast<const uint8_t *>(embedding.data);
  std::vector<float> x(n * c.dim);
  for (int64_t t = 0; t < n; ++t)
    kvrt::dequantizeRow(embedding.format, bytes + int64_t(tokens[t]) * rowBytes,
                        &x[t * c.dim], c.dim);
  return x;
}

WeightFormats kvir::modelWeightFormats(const kvrt_model *model) {
  kvrt_model_config config;
  kvrt_model_weights weights;
  if (kvrt_model_get_config(model, &config) != KVRT_OK ||
      kvrt_model_get_weights(model, &weights) != KVRT_OK)
    return WeightFormats();
  return WeightFormats::of(weights, config.n_layers);
}

ForwardWeights kvir::forwardWeights(const kvrt_model_weights &w) {
  ForwardWeights weights;
  size_t i = 0;
  for (const kvrt::TensorDecl &t : kvrt::kTensors)
    if (t.reader == kvrt::TensorReader::Forward)
      weights[i++] = w.*t.member;
  return weights;
}

std::array<kvrt_memref_weight *, kForwardWeights>
kvir::weightFields(kvrt_prefill_args &a) {
#define KVRT_MODEL_TENSOR(field, gguf, scope, rows, cols, kind, reader, ...)   \
  KVIR_WEIGHT_FIELD_##reader(field)
#define KVIR_WEIGHT_FIELD_Forward(field) &a.field,
#define KVIR_WEIGHT_FIELD_Runtime(field)
  kvrt_memref_weight *fields[] = {
#include "runtime/core/ModelTensors.def"
  };
#undef KVIR_WEIGHT_FIELD_Forward
#undef KVIR_WEIGHT_FIELD_Runtime
  static_assert(std::size(fields) == kForwardWeights,
                "every tensor the forward reads has a weight field");
  std::array<kvrt_memref_weight *, kForwardWeights> out;
  std::copy(std::begin(fields), std::end(fields), out.begin());
  return out;
}

void WeightTable::fill(kvrt_prefill_args &args) {
  std::array<kvrt_memref_weight *, kForwardWeights> out = weightFields(args);
  for (size_t i = 0; i < kForwardWeights; ++i)
    *out[i] = fields[i];
  args.weight_offsets = memrefI64(offsets.data(), int64_t(offsets.size()));
}

namespace {

/// Writes weight `i`'s offsets (one per slice, or the one of a global
/// tensor repeated) into its row of `offsets`.
void setRow(std::vector<int64_t> &offsets, size_t i, int64_t layers,
            const std::vector<int64_t> &slices) {
  for (int64_t l = 0; l < layers; ++l)
    offsets[i * size_t(layers) + size_t(l)] =
        slices.empty() ? 0
                       : slices[std::min<size_t>(size_t(l), slices.size() - 1)];
}

} // namespace

WeightTable kvir::hostWeightTable(const kvrt_model_config &c,
                                  const kvrt_model_weights &w) {
  WeightTable table;
  ForwardWeights weights = forwardWeights(w);
  table.offsets.assign(kForwardWeights * size_t(c.n_layers), 0);
  for (size_t i = 0; i < kForwardWeights; ++i) {
    const kvrt_weight &weight = weights[i];
    if (weight.n_slices == 0) {
      table.fields[i] = memrefBytes(nullptr, 0);
      continue;
    }
    // Addresses as integers: the slices of one weight lie in one allocation
    // (a file's mapping, or the model's memory), but the weights may not.
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (int64_t s = 0; s < weight.n_slices; ++s) {
      uintptr_t at = reinterpret_cast<uintptr_t>(weight.slices[s].data);
      lo = std::min(lo, at);
      hi = std::max(hi, at + uintptr_t(weight.slices[s].bytes));
    }
    std::vector<int64_t> slices;
    for (int64_t s = 0; s < weight.n_slices; ++s)
      slices.push_back(
          int64_t(reinterpret_cast<uintptr_t>(weight.slices[s].data) - lo));
    setRow(table.offsets, i, c.n_layers, slices);
    table.fields[i] =
        memrefBytes(reinterpret_cast<const void *>(lo), int64_t(hi - lo));
  }
  return table;
}

WeightUpload kvir::planWeightUpload(const kvrt_model_config &c,
                                    const kvrt_model_weights &w) {
  WeightUpload plan;
  ForwardWeights weights = forwardWeights(w);
  plan.offsets.assign(kForwardWeights * size_t(c.n_layers), 0);
  for (size_t i = 0; i < kForwardWeights; ++i) {
    std::vector<int64_t> slices;
    for (int64_t s = 0; s < weights[i].n_slices; ++s) {
      const kvrt_weight_slice &slice = weights[i].slices[s];
      plan.pieces.push_back({slice.data, slice.bytes, plan.bytes});
      slices.push_back(plan.bytes);
      plan.bytes += (slice.bytes + 255) / 256 * 256;
    }
    setRow(plan.offsets, i, c.n_layers, slices);
  }
  return plan;
}

WeightTable WeightUpload::table(void *base) const {
  // Every field is the whole buffer: the offsets count from its start.
  WeightTable t;
  for (kvrt_memref_weight &field : t.fields)
    field = memrefBytes(base, bytes);
  t.offsets = offsets;
  return t;
}

namespace {

/// Packs the [m][k] row-major matrix b into panels of `width` outputs at
/// `out`: out[p * k * width + i * width + j] = b[p * width + j][i], rows past
/// m zero (the layout of CpuMatmul.cpp's emitPackPanels).
void packPanels(const float *b, int64_t m, int64_t k, int64_t width,
                float *out) {
  for (int64_t p = 0; p * width < m; ++p) {
    float *panel = out + p * k * width;
    for (int64_t j = 0; j < width; ++j) {
      int64_t row = p * width + j;
      for (int64_t i = 0; i < k; ++i)
        panel[i * width + j] = row < m ? b[row * k + i] : 0.0f;
    }
  }
}

/// Calls `fn(entry, m, k, slice)` for each slice of each matrix the forward
/// multiplies ([m][k]), `entry` its row of weight_offsets (weight w, layer
/// l: w * n_layers + l).
template <typename Fn>
void forEachForwardMatrix(const kvrt_model &model, Fn fn) {
  const kvrt_model_config &c = model.config;
  size_t w = 0;
  for (const kvrt::TensorDecl &t : kvrt::kTensors) {
    if (t.reader != kvrt::TensorReader::Forward)
      continue;
    size_t index = w++;
    if (t.kind != kvrt::TensorKind::Matrix)
      continue;
    int64_t m = int64_t(kvrt::shapeValue(t.rows, c));
    int64_t k = int64_t(kvrt::shapeValue(t.cols, c));
    const kvrt_weight &weight = model.weights.*t.member;
    for (int64_t l = 0; l < std::min<int64_t>(weight.n_slices, c.n_layers); ++l)
      fn(index * size_t(c.n_layers) + size_t(l), m, k, weight.slices[l]);
  }
}

std::shared_ptr<const PackedWeights> packModel(const kvrt_model &model,
                                               int64_t width) {
  const kvrt_model_config &c = model.config;
  auto packed = std::make_shared<PackedWeights>();
  packed->width = width;
  packed->offsets.assign(kForwardWeights * size_t(c.n_layers), -1);
  struct Slice {
    const float *data;
    int64_t m, k, at;
  };
  std::vector<Slice> slices;
  forEachForwardMatrix(model, [&](size_t entry, int64_t m, int64_t k,
                                  const kvrt_weight_slice &slice) {
    if (slice.format != KVRT_WEIGHT_F32)
      return;
    packed->offsets[entry] = packed->floats;
    slices.push_back(
        {static_cast<const float *>(slice.data), m, k, packed->floats});
    packed->floats += (m + width - 1) / width * width * k;
  });
  if (packed->floats == 0)
    return packed;
  // Every decode step streams the panels whole: on 2 MiB pages where the
  // kernel grants them (HugePages.h).
  size_t bytes = size_t(packed->floats) * sizeof(float);
  packed->data = {static_cast<float *>(kvrt::allocateStreamed(bytes)),
                  std::free};
  if (!packed->data)
    throw std::bad_alloc();
  for (const Slice &slice : slices)
    packPanels(slice.data, slice.m, slice.k, width,
               packed->data.get() + slice.at);
  return packed;
}

/// Whether this CPU runs the decode rows' tiles (CpuInt8Matmul.cpp's
/// VNNI-512 integer dots).
bool hostReadsDecodeRows() {
  return __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vnni");
}

/// Whether this host's decode steps read the file's rows by default: one
/// with AMX int8 tiles (an Intel Xeon from Sapphire Rapids on). Its
/// prefill multiplies Q8_0 and Q4_K on AMX tiles from the file's rows
/// (CpuInt8Matmul.cpp, emitAmxPanelTiles), so a copy for decode holds those
/// weights twice (TinyLlama-shape Q8_0: peak RSS 2187 MiB against a 1049
/// MiB file), and there the decode steps read the file's rows faster: the
/// Intel Xeon of 2026-12-05 (2 cores, AMX), kv-run --greedy 48 after 64
/// ids, three alternated rounds, ms a step, copy / file's rows: TinyLlama-
/// shape Q8_0 one thread 74.7-76.8 / 67.3-68.7, two 39.2-39.9 / 36.7-37.9;
/// a Q4_K_M model of dim 1024 (one layer, 7.6 MB; four layers, 27 MB) the
/// same within the noise (bench/results/intel-xeon-decode-prefetch.txt).
/// The Zen 4 machine's figures, below, are the other way: there a file
/// row's tile computes about as fast as memory reads and the copy's twice.
bool hostKeepsFileRows() {
  return __builtin_cpu_supports("amx-tile") &&
         __builtin_cpu_supports("amx-int8");
}

/// Q4_K matrices are repacked for decode only where the matrices the
/// forward multiplies, all formats, total at most this many bytes: a step
/// that stays in the last-level cache is instruction-bound, and there the
/// repacked rows took a Q4_K_M step (dim 1024, hidden 2816, Zen 4 with a
/// 32 MiB L3, medians of alternated runs) from 0.29 to 0.19 ms on one thread
/// and 0.30 to 0.16 on two (one layer, 7.6 MB), 0.54 to 0.34 and 0.49 to
/// 0.33 (two layers, 13.9 MB); with four layers (27 MB) 1.13 to 1.01 on one
/// thread but 1.06 to 1.25 on two, and from eight layers (54 MB) to
/// TinyLlama's shape (631 MB) the step read from memory took as long either
/// way or longer (docs/cpu-backend.md, "A layout for decode": the copy
/// costs its making and 2.8% more bytes). Q8_0 matrices are repacked at
/// every size.
constexpr int64_t kQ4KRowsMaxForwardBytes = int64_t(16) << 20;

std::shared_ptr<const DecodeRows> repackModel(const kvrt_model &model) {
  const kvrt_model_config &c = model.config;
  auto rows = std::make_shared<DecodeRows>();
  rows->offsets.assign(kForwardWeights * size_t(c.n_layers), -1);
  struct Slice {
    const void *data;
    int64_t m, k, at, fileBytes;
    kvrt_weight_format format;
  };
  int64_t forwardBytes = 0;
  forEachForwardMatrix(
      model, [&](size_t, int64_t, int64_t, const kvrt_weight_slice &slice) {
        forwardBytes += slice.bytes;
      });
  auto repacks = [&](kvrt_weight_format format) {
    if (format == KVRT_WEIGHT_Q4_K)
      return forwardBytes <= kQ4KRowsMaxForwardBytes;
    return kvrt::decodeGroupBlockBytes(format) > 0;
  };
  std::vector<Slice> slices;
  forEachForwardMatrix(model, [&](size_t entry, int64_t m, int64_t k,
                                  const kvrt_weight_slice &slice) {
    if (!repacks(slice.format))
      return;
    rows->offsets[entry] = rows->bytes;
    slices.push_back(
        {slice.data, m, k, rows->bytes, slice.bytes, slice.format});
    // Each slice starts on a 64-byte line of its own.
    rows->bytes += (kvrt::decodeRowsBytes(slice.format, m, k) + 63) / 64 * 64;
  });
  if (rows->bytes == 0)
    return rows;
  rows->data = {
      static_cast<uint8_t *>(kvrt::allocateStreamed(size_t(rows->bytes))),
      std::free};
  // Without the memory for the copy the forward reads the file's rows.
  if (!rows->data)
    return std::make_shared<DecodeRows>();
  for (const Slice &slice : slices) {
    struct Item {
      const Slice *slice;
      uint8_t *to;
    } item{&slice, rows->data.get() + slice.at};
    kvrt_parallel_for((slice.m + kvrt::kQ8Rows16 - 1) / kvrt::kQ8Rows16,
                      [](void *context, int64_t begin, int64_t end) {
                        auto &i = *static_cast<Item *>(context);
                        kvrt::repackDecodeRows(i.slice->format, i.slice->data,
                                               i.slice->m, i.slice->k, i.to,
                                               begin, end);
                      },
                      &item);
    // The forward reads the copy from now on: the pages of the slice in
    // the file's mapping go back (whole pages inside it; its neighbours
    // keep theirs). Never memory of the model's own.
    auto begin = reinterpret_cast<uintptr_t>(slice.data);
    uintptr_t end = begin + uintptr_t(slice.fileBytes);
    auto mapped = reinterpret_cast<uintptr_t>(model.mappedBegin);
    if (model.mappedBegin && begin >= mapped &&
        end <= mapped + model.mappedBytes) {
      uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
      uintptr_t first = (begin + page - 1) / page * page;
      uintptr_t last = end / page * page;
      if (last > first)
        madvise(reinterpret_cast<void *>(first), last - first, MADV_DONTNEED);
      rows->released.push_back(slice.data);
      rows->releasedBytes += slice.fileBytes;
    }
  }
  return rows;
}

} // namespace

const DecodeRows *kvir::decodeRows(const kvrt_model &model) {
  using Repack = kvrt_model::Repack;
  if (model.repack == Repack::Never || !hostReadsDecodeRows() ||
      (model.repack == Repack::ByHost && hostKeepsFileRows()))
    return nullptr;
  std::call_once(model.decodeRowsOnce,
                 [&] { model.decodeRows = repackModel(model); });
  return model.decodeRows->data ? model.decodeRows.get() : nullptr;
}

const PackedWeights *kvir::packedWeights(const kvrt_model &model,
                                         int64_t width) {
  std::call_once(model.packedOnce,
                 [&] { model.packed = packModel(model, width); });
  return model.packed->width == width ? model.packed.get() : nullptr;
}

uint64_t kvir::packedWeightBytes(const kvrt_model &model) {
  // Read only after packedWeights and decodeRows returned on this thread,
  // or never.
  uint64_t bytes =
      model.packed ? uint64_t(model.packed->floats) * sizeof(float) : 0;
  if (model.decodeRows)
    bytes += uint64_t(model.decodeRows->bytes);
  return bytes;
}

uint64_t kvir::releasedWeightBytes(const kvrt_model &model) {
  // Read only after decodeRows returned on this thread, or never.
  return model.decodeRows ? uint64_t(model.decodeRows->releasedBytes) : 0;
}

uint64_t kvir::weightHugePageBytes(const kvrt_model &model) {
  std::vector<std::pair<const void *, size_t>> ranges;
  const std::vector<const void *> none;
  const std::vector<const void *> &released =
      model.decodeRows ? model.decodeRows->released : none;
  for (const kvrt::TensorSpec &spec : kvrt::specsOf(model.config)) {
    const kvrt_weight &w = model.weights.*spec.decl->member;
    for (int64_t l = 0; l < w.n_slices; ++l)
      if (std::find(released.begin(), released.end(), w.slices[l].data) ==
          released.end())
        ranges.push_back({w.slices[l].data, size_t(w.slices[l].bytes)});
  }
  if (model.packed && model.packed->data)
    ranges.push_back({model.packed->data.get(),
                      size_t(model.packed->floats) * sizeof(float)});
  if (model.decodeRows && model.decodeRows->data)
    ranges.push_back(
        {model.decodeRows->data.get(), size_t(model.decodeRows->bytes)});
  return kvrt::hugePageBytes(ranges);
}

kvrt_status kvir::checkForwardLayout(const Forward &forward,
                                     const kvrt_model_config &c,
                                     const kvrt_page_layout &layout) {
  if (layout.n_layers != c.n_layers || layout.n_kv_heads != c.n_kv_heads ||
      layout.head_size != headSize(c))
    return kvrt::fail(KVRT_ERR_INVALID_ARGUMENT,
                      kvrt::str("the view's pool holds ", layout.n_layers,
                                " layers x ", layout.n_kv_heads,
                                " kv heads x head size ", layout.head_size,
                                ", the model needs ", c.n_layers, " x ",
                                c.n_kv_heads, " x ", headSize(c)));
  std::optional<kvrt_kv_dtype> dtype = kvir::kvDtypeOfKey(forward.key);
  if (!dtype || *dtype != layout.dtype)
    return kvrt::fail(
        KVRT_ERR_INVALID_ARGUMENT,
        kvrt::str("the view's pool holds ", kvir::kvDtypeName(layout.dtype),
                  " pages; the forward was compiled for ",
                  dtype ? kvir::kvDtypeName(*dtype) : "unknown", " pages"));
  return KVRT_OK;
}
